//! A finite site and its sections, read from a JSON file, checked for what
//! makes a file wrong (bad input: an error naming the item) apart from
//! what makes a well-formed site fail to glue (an [`Obstruction`](super::Obstruction), found
//! by `gluing::glue`).
//!
//! The format (fields described in the README, "Sheaf gluing"):
//!
//! ```json
//! {
//!   "points": 8, "dim": 1, "tolerance": 0.0,
//!   "opens": [{"name": "U", "points": [0, 1, 2, 3, 4]},
//!             {"name": "V", "points": [3, 4, 5, 6, 7]}],
//!   "inclusions": [],
//!   "cover": ["U", "V"],
//!   "intersections": [{"opens": ["U", "V"], "points": [3, 4]}],
//!   "sections": [{"open": "U", "values": [0, 1, 2, 3, 4]},
//!                {"open": "V", "values": [3, 4, 5, 6, 7]}]
//! }
//! ```
//!
//! A section lists `dim` values for each point of its open, in the order
//! the open lists its points; values are rounded to f16 (the residual
//! kernel's inputs), so each must be finite and at most 65504 in size.

use serde::Deserialize;
use std::collections::{BTreeSet, HashMap};
use std::fmt;

/// The file as written (see the module's documentation).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SiteFile {
    points: usize,
    #[serde(default = "one")]
    dim: usize,
    #[serde(default)]
    tolerance: f64,
    opens: Vec<OpenFile>,
    #[serde(default)]
    inclusions: Vec<[String; 2]>,
    cover: Vec<String>,
    #[serde(default)]
    intersections: Vec<IntersectionFile>,
    #[serde(default)]
    sections: Vec<SectionFile>,
}

fn one() -> usize {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenFile {
    name: String,
    points: Vec<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IntersectionFile {
    opens: [String; 2],
    points: Vec<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SectionFile {
    open: String,
    values: Vec<f64>,
}

/// An open: its name and its points, in the order its section lists them.
#[derive(Clone, Debug)]
pub struct Open {
    pub name: String,
    pub points: Vec<usize>,
}

/// A declared intersection of two opens (indices into `Site::opens`, the
/// first listed first), and its points.
#[derive(Clone, Debug)]
pub struct Intersection {
    pub opens: [usize; 2],
    pub points: Vec<usize>,
}

/// A checked site: every name resolves, every declared intersection and
/// inclusion holds, every section has the length of its open and values
/// an f16 holds. (Whether it glues is `gluing::glue`'s question.)
#[derive(Clone, Debug)]
pub struct Site {
    pub points: usize,
    pub dim: usize,
    pub tolerance: f64,
    pub opens: Vec<Open>,
    /// Indices into `opens`, in the file's order.
    pub cover: Vec<usize>,
    pub intersections: Vec<Intersection>,
    /// Per open, its section (`dim` values a point, rounded to f16), if
    /// the file gives one.
    pub sections: Vec<Option<Vec<half::f16>>>,
}

/// What is wrong with a site file: the item, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct SiteError {
    /// Where: `opens[2] "U"`, `sections["V"]`, `the file`.
    pub item: String,
    pub message: String,
}

impl fmt::Display for SiteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.item, self.message)
    }
}

impl std::error::Error for SiteError {}

pub(super) fn wrong(item: impl Into<String>, message: impl Into<String>) -> SiteError {
    SiteError { item: item.into(), message: message.into() }
}

impl Site {
    /// Read and check a site from JSON text.
    pub fn parse(text: &str) -> Result<Site, SiteError> {
        let file: SiteFile = serde_json::from_str(text).map_err(|e| wrong("the file", format!("not a site file: {}", e)))?;
        Site::check(file)
    }

    /// Read and check a site file.
    pub fn read(path: &std::path::Path) -> Result<Site, SiteError> {
        let text = std::fs::read_to_string(path).map_err(|e| wrong(path.display().to_string(), e.to_string()))?;
        Site::parse(&text)
    }

    fn check(file: SiteFile) -> Result<Site, SiteError> {
        if file.points == 0 {
            return Err(wrong("points", "the space needs at least one point"));
        }
        if file.dim == 0 {
            return Err(wrong("dim", "a section needs at least one value a point"));
        }
        if !(file.tolerance.is_finite() && file.tolerance >= 0.0) {
            return Err(wrong("tolerance", format!("{} is not a finite number >= 0", file.tolerance)));
        }
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut opens = Vec::new();
        for (i, o) in file.opens.iter().enumerate() {
            let item = format!("opens[{}] \"{}\"", i, o.name);
            if o.name.is_empty() {
                return Err(wrong(item, "an open needs a name"));
            }
            if index.insert(&o.name, i).is_some() {
                return Err(wrong(item, "another open has this name"));
            }
            let mut seen = BTreeSet::new();
            for &p in &o.points {
                if p >= file.points {
                    return Err(wrong(item, format!("point {} is outside the space (points 0..{})", p, file.points)));
                }
                if !seen.insert(p) {
                    return Err(wrong(item, format!("point {} is listed twice", p)));
                }
            }
            opens.push(Open { name: o.name.clone(), points: o.points.clone() });
        }
        let find = |item: &str, name: &str| index.get(name).copied().ok_or_else(|| wrong(item, format!("no open is named \"{}\"", name)));
        let sets: Vec<BTreeSet<usize>> = opens.iter().map(|o| o.points.iter().copied().collect()).collect();
        for (i, [inner, outer]) in file.inclusions.iter().enumerate() {
            let item = format!("inclusions[{}] \"{}\" in \"{}\"", i, inner, outer);
            let (a, b) = (find(&item, inner)?, find(&item, outer)?);
            if let Some(p) = sets[a].difference(&sets[b]).next() {
                return Err(wrong(item, format!("point {} of \"{}\" is not in \"{}\"", p, inner, outer)));
            }
        }
        if file.cover.is_empty() {
            return Err(wrong("cover", "a cover needs at least one open"));
        }
        let mut cover = Vec::new();
        for (i, name) in file.cover.iter().enumerate() {
            let o = find(&format!("cover[{}]", i), name)?;
            if cover.contains(&o) {
                return Err(wrong(format!("cover[{}]", i), format!("\"{}\" is listed twice", name)));
            }
            cover.push(o);
        }
        let mut intersections: Vec<Intersection> = Vec::new();
        for (i, x) in file.intersections.iter().enumerate() {
            let item = format!("intersections[{}] \"{}\" and \"{}\"", i, x.opens[0], x.opens[1]);
            let (a, b) = (find(&item, &x.opens[0])?, find(&item, &x.opens[1])?);
            if a == b {
                return Err(wrong(item, "an intersection is of two different opens"));
            }
            if intersections.iter().any(|y| y.opens == [a, b] || y.opens == [b, a]) {
                return Err(wrong(item, "these two opens' intersection is declared twice"));
            }
            let mut seen = BTreeSet::new();
            for &p in &x.points {
                if !seen.insert(p) {
                    return Err(wrong(item, format!("point {} is listed twice", p)));
                }
                for o in [a, b] {
                    if !sets[o].contains(&p) {
                        return Err(wrong(item, format!("point {} is not in \"{}\": an intersection is a subset of both opens", p, opens[o].name)));
                    }
                }
            }
            intersections.push(Intersection { opens: [a, b], points: x.points.clone() });
        }
        let mut sections: Vec<Option<Vec<half::f16>>> = vec![None; opens.len()];
        for (i, s) in file.sections.iter().enumerate() {
            let item = format!("sections[{}] \"{}\"", i, s.open);
            let o = find(&item, &s.open)?;
            if sections[o].is_some() {
                return Err(wrong(item, "this open has a section already"));
            }
            let want = opens[o].points.len() * file.dim;
            if s.values.len() != want {
                return Err(wrong(item, format!("{} values, but the open has {} points of {} values each: {} expected", s.values.len(), opens[o].points.len(), file.dim, want)));
            }
            if let Some((j, v)) = s.values.iter().enumerate().find(|(_, v)| !(v.is_finite() && v.abs() <= 65504.0)) {
                return Err(wrong(item, format!("value {} ({}) is not finite or is beyond f16's 65504", j, v)));
            }
            sections[o] = Some(s.values.iter().map(|&v| half::f16::from_f64(v)).collect());
        }
        Ok(Site { points: file.points, dim: file.dim, tolerance: file.tolerance, opens, cover, intersections, sections })
    }

    /// The values of open `o`'s section at point `p` (one of its points).
    pub fn at(&self, o: usize, p: usize) -> Option<&[half::f16]> {
        let k = self.opens[o].points.iter().position(|&q| q == p)?;
        self.sections[o].as_ref().map(|s| &s[k * self.dim..(k + 1) * self.dim])
    }
}
