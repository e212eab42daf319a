"""Largest coefficient per monomial over the lines of compiler/examples/derived_bounds.rs
(every target and schedule variant of a kernel), rounded up to two digits:
the smallest tolerance formula of that shape every schedule meets.
Usage: derived_bounds FILE.tk > b.tsv; python3 bench/derived_bounds_max.py b.tsv"""
import re,sys,math,collections
rows=[l.rstrip('\n').split('\t') for l in open(sys.argv[1])]
def parse(p):
    out={}
    for term in p.split(' + '):
        parts=term.split('*'); c=float(parts[0]); mono='*'.join(parts[1:])
        out[mono]=max(out.get(mono,0),c)
    return out
agg=collections.defaultdict(dict); rel=collections.defaultdict(float)
for t,name,outp,poly,r in rows:
    base=re.sub(r'_(c\d+x\d+|b\d+)$','',name)
    key=(base,outp)
    for m,c in parse(poly).items():
        agg[key][m]=max(agg[key].get(m,0),c)
    rel[key]=max(rel[key],float(r))
def up2(x):
    if x==0: return 0
    e=math.floor(math.log10(x)); m=x/10**e
    return math.ceil(m*10-1e-9)/10*10**e
for key in agg:
    terms=sorted(agg[key].items(), key=lambda kv:-kv[1])
    print(key, ' + '.join(f"{up2(c):.2g}*{m}" if m else f"{up2(c):.2g}" for m,c in terms), 'rel', f"{up2(rel[key]):.2g}")
