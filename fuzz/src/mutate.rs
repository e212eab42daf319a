//! Token-level mutation of real programs (`examples/ops`): the source is
//! split into tokens (identifiers, numbers, punctuation, whitespace,
//! comments) and a few tokens are deleted, duplicated, swapped with their
//! neighbour, or replaced by another token of the same file or by an edge
//! case (huge and tiny numbers, keywords, dtypes, brackets), so that most
//! mutants stay close to a program the compiler accepts and reach the
//! later stages.

use proptest::prelude::*;

/// Tokens of `src`, concatenating back to it.
pub fn tokens(src: &str) -> Vec<&str> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c.is_ascii_whitespace() {
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || ((b[i] == b'-' || b[i] == b'+') && matches!(b[i - 1], b'e' | b'E'))) {
                i += 1;
            }
        } else {
            // One character (a UTF-8 sequence whole).
            i += 1;
            while i < b.len() && (b[i] & 0xC0) == 0x80 {
                i += 1;
            }
        }
        out.push(&src[start..i]);
    }
    out
}

/// Tokens worth inserting: edges of the number line, every keyword and
/// dtype, brackets and operators.
pub const EDGE_TOKENS: &[&str] = &[
    "0", "1", "-1", "0.0", "1e400", "1e-400", "65504.0", "4294967296", "9223372036854775807", "99999999999999999999", "2147483648", "0.5", "NaN", "inf", "kernel", "fn", "let", "inout",
    "requires", "domain", "tolerance", "ensures", "abs", "rel", "in", "sum", "max", "min", "argmax", "select", "f16", "bf16", "f32", "f64", "i32", "u32", "i64", "bool", "[", "]", "(", ")", "{", "}",
    ";", ",", ":", "->", "..", "+", "-", "*", "/", "<", "<=", "==", "!", "&&", "||", "\u{e9}", "X", "K", "N",
];

#[derive(Clone, Debug)]
pub enum Edit {
    Delete(usize),
    Duplicate(usize),
    SwapNext(usize),
    /// Replace by another token of the same file.
    Borrow(usize, usize),
    /// Replace by an edge token.
    Edge(usize, usize),
    /// Insert an edge token before this one.
    Insert(usize, usize),
}

/// Edits that keep the token's class (a number for a number, a name for a
/// name) come more often than those that break the syntax, so that most
/// mutants parse and reach the checker, the scheduler and the prover.
pub fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        1 => (any::<usize>()).prop_map(Edit::Delete),
        1 => (any::<usize>()).prop_map(Edit::Duplicate),
        1 => (any::<usize>()).prop_map(Edit::SwapNext),
        4 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::Borrow(a, b)),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::Edge(a, b)),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::Insert(a, b)),
    ]
}

/// The class of a token, for edits that keep it: numbers, names,
/// arithmetic operators, comparisons; `None` for the rest (brackets and
/// separators, which a class-keeping edit leaves alone: the structural
/// edits break them).
fn class(t: &str) -> Option<u8> {
    match t.as_bytes().first() {
        Some(c) if c.is_ascii_digit() => Some(0),
        Some(c) if c.is_ascii_alphabetic() || *c == b'_' => Some(1),
        Some(b'+' | b'-' | b'*' | b'/') if t.len() == 1 => Some(2),
        Some(b'<' | b'>' | b'=' | b'!') => Some(3),
        _ => None,
    }
}

/// The items of a program one by one, each with the file's `fn` helpers
/// (a mutant of one kernel can compile where the whole file would fail on
/// the first broken kernel).
pub fn kernels_of(src: &str) -> Vec<String> {
    let mut helpers = String::new();
    let mut kernels: Vec<String> = Vec::new();
    let mut current: Option<String> = None;
    for line in src.split_inclusive('\n') {
        let item = line.starts_with("kernel ") || line.starts_with("fn ");
        // Only doc comments and blank lines so far: the item they document.
        let docs_only = current.as_ref().is_some_and(|c| c.lines().all(|l| l.trim().is_empty() || l.starts_with("///")));
        let starts = (item || line.starts_with("///")) && !docs_only;
        if starts {
            if let Some(c) = current.take() {
                if c.lines().any(|l| l.starts_with("fn ")) { helpers.push_str(&c) } else if c.contains("kernel ") { kernels.push(c) }
            }
            current = Some(String::new());
        }
        if let Some(c) = current.as_mut() {
            c.push_str(line);
        }
    }
    if let Some(c) = current {
        if c.lines().any(|l| l.starts_with("fn ")) { helpers.push_str(&c) } else if c.contains("kernel ") { kernels.push(c) }
    }
    kernels.into_iter().map(|k| format!("{}\n{}", helpers, k)).collect()
}

/// `src` with `edits` applied to its tokens (whitespace and comments are
/// tokens too, but an edit picks among the others).
pub fn apply(src: &str, edits: &[Edit]) -> String {
    let mut toks: Vec<String> = tokens(src).into_iter().map(str::to_string).collect();
    for e in edits {
        let meaningful: Vec<usize> = toks.iter().enumerate().filter(|(_, t)| !t.trim().is_empty() && !t.starts_with("//")).map(|(i, _)| i).collect();
        if meaningful.is_empty() {
            break;
        }
        let pick = |k: usize| meaningful[k % meaningful.len()];
        match *e {
            Edit::Delete(k) => {
                toks.remove(pick(k));
            }
            Edit::Duplicate(k) => {
                let i = pick(k);
                let t = toks[i].clone();
                toks.insert(i, t);
            }
            Edit::SwapNext(k) => {
                let n = meaningful.len();
                let (a, b) = (meaningful[k % n], meaningful[(k + 1) % n]);
                toks.swap(a, b);
            }
            Edit::Borrow(k, from) => {
                // Another token of the same class, where there is one.
                let i = pick(k);
                if class(&toks[i]).is_some() {
                    let same: Vec<usize> = meaningful.iter().copied().filter(|&j| class(&toks[j]) == class(&toks[i])).collect();
                    toks[i] = toks[same[from % same.len()]].clone();
                }
            }
            Edit::Edge(k, which) => {
                let i = pick(k);
                let same: Vec<&str> = EDGE_TOKENS.iter().copied().filter(|e| class(e).is_some() && class(e) == class(&toks[i])).collect();
                if !same.is_empty() {
                    toks[i] = same[which % same.len()].to_string();
                }
            }
            Edit::Insert(k, which) => {
                let i = pick(k);
                toks.insert(i, format!("{} ", EDGE_TOKENS[which % EDGE_TOKENS.len()]));
            }
        }
    }
    toks.concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_concatenate_back_and_edits_change_tokens_not_bytes() {
        let src = "kernel k(x: f16[N]) -> (y: f16[N])\n    requires N >= 1 // c\n{\n    y[i] = f16(1e-3 * f32(x[i]));\n}\n";
        let t = tokens(src);
        assert_eq!(t.concat(), src);
        assert!(t.contains(&"1e-3") && t.contains(&"// c") && t.contains(&"requires"));
        let once = apply(src, &[Edit::Edge(0, 0)]);
        assert!(once.starts_with("NaN k("), "a name is replaced by a name: {}", once);
        assert_eq!(apply(src, &[Edit::Delete(0)]).trim_start(), src.trim_start_matches("kernel").trim_start());
    }

    #[test]
    fn a_file_splits_into_its_kernels_each_with_the_helpers_and_its_docs() {
        let src = "// header\nfn sq(v: f32) -> f32 { v * v }\n\n/// First.\n/// More.\nkernel a(x: f32[N]) -> (y: f32[N])\n    requires N >= 1\n{\n    y[i] = sq(x[i]);\n}\n\nkernel b(x: f32[N]) -> (y: f32[N])\n    requires N >= 1\n{\n    y[i] = x[i];\n}\n";
        let k = kernels_of(src);
        assert_eq!(k.len(), 2, "{:?}", k);
        assert!(k[0].contains("fn sq") && k[0].contains("/// First.\n/// More.\nkernel a") && !k[0].contains("kernel b"), "{}", k[0]);
        assert!(k[1].contains("fn sq") && k[1].contains("kernel b") && !k[1].contains("kernel a"), "{}", k[1]);
    }
}
