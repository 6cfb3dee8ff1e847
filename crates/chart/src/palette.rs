//! Every colour a plot draws data with, in one place, so a reader learns
//! one mapping: the main series of a plot (in smplab: the executors) in
//! Okabe–Ito (blue, orange, bluish green, black),
//! categories (factors, exit reasons) in Paul Tol's "muted" scheme, which
//! shares no colour with the executors, and grey for reference lines.
//! Both schemes are designed to stay distinguishable under the common forms
//! of colour blindness (Okabe & Ito, "Color Universal Design", 2008; Tol,
//! "Colour schemes", SRON/EPS/TN/09-002, 2021).
//!
//! [`Colour`] has no public constructor: a chart can only draw data in a
//! colour from here.

/// A data colour of the report's palette.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Colour(&'static str);

impl Colour {
    /// `#RRGGBB`.
    pub fn hex(self) -> &'static str {
        self.0
    }

    /// `(r, g, b)`, 0–255.
    pub fn rgb(self) -> (u8, u8, u8) {
        let c = |i: usize| u8::from_str_radix(&self.0[i..i + 2], 16).unwrap_or(0);
        (c(1), c(3), c(5))
    }
}

impl std::fmt::Display for Colour {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// The main series of every plot (Okabe–Ito): four colours a reader learns
/// once (a report gives each series the same one everywhere).
pub const SERIES: [Colour; 4] = [
    Colour("#0072B2"), // blue
    Colour("#E69F00"), // orange
    Colour("#009E73"), // bluish green
    Colour("#000000"), // black
];

/// Categories within one plot: factors of a diagnosis, exit reasons (Tol
/// muted, its nine colours).
pub const CATEGORIES: [Colour; 9] = [
    Colour("#332288"), // indigo
    Colour("#88CCEE"), // cyan
    Colour("#CC6677"), // rose
    Colour("#DDCC77"), // sand
    Colour("#117733"), // green
    Colour("#AA4499"), // purple
    Colour("#44AA99"), // teal
    Colour("#882255"), // wine
    Colour("#999933"), // olive
];

/// Reference lines (perfect scaling) and "everything else" segments.
pub const REFERENCE: Colour = Colour("#999999");

/// The `i`-th main series colour (cycling past four).
pub fn series(i: usize) -> Colour {
    SERIES[i % SERIES.len()]
}

/// The `i`-th category colour (cycling past nine).
pub fn category(i: usize) -> Colour {
    CATEGORIES[i % CATEGORIES.len()]
}

/// Every data colour, for checks that a plot drew only palette colours.
pub fn all() -> impl Iterator<Item = Colour> {
    SERIES
        .into_iter()
        .chain(CATEGORIES)
        .chain(std::iter::once(REFERENCE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn distance(a: Colour, b: Colour) -> f64 {
        let (x, y) = (a.rgb(), b.rgb());
        let d = |p: u8, q: u8| (f64::from(p) - f64::from(q)).powi(2);
        (d(x.0, y.0) + d(x.1, y.1) + d(x.2, y.2)).sqrt()
    }

    #[test]
    fn series_and_category_colours_are_disjoint_and_far_apart() {
        let all: Vec<Colour> = all().collect();
        let mut unique = all.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), all.len(), "a colour is used twice: {all:?}");
        // Not only different strings: no category colour can be mistaken
        // for a series' (RGB distance; the closest pair, Tol teal and
        // Okabe–Ito bluish green, is about 80 apart).
        for e in SERIES {
            for c in CATEGORIES.into_iter().chain([REFERENCE]) {
                assert!(
                    distance(e, c) > 60.0,
                    "{c} is too close to series colour {e}"
                );
            }
        }
        for (i, a) in SERIES.iter().enumerate() {
            for b in &SERIES[i + 1..] {
                assert!(distance(*a, *b) > 70.0, "{a} vs {b}");
            }
        }
    }

    #[test]
    fn every_series_has_its_own_colour() {
        let mut c: Vec<Colour> = (0..4).map(series).collect();
        c.dedup();
        assert_eq!(c.len(), 4);
        assert_eq!(series(0).hex(), "#0072B2");
        assert_eq!(series(2).rgb(), (0x00, 0x9E, 0x73));
        assert_eq!(series(4), series(0));
        assert_eq!(category(9), category(0));
    }
}
