//! Tests of the SVG charts.

use super::*;

#[test]
fn nice_axis_maxima() {
    assert_eq!(nice_max(0.0), 1.0);
    assert_eq!(nice_max(0.7), 1.0);
    assert_eq!(nice_max(1.2), 2.0);
    assert_eq!(nice_max(2.2), 2.5);
    assert_eq!(nice_max(430.0), 500.0);
    assert_eq!(nice_range(-1.0, 52.0), (-20.0, 80.0));
    assert_eq!(nice_range(0.0, 2.0), (0.0, 2.5));
    let (a, b) = nice_range(-306.0, 1546.0);
    assert!(a <= -306.0 && b >= 1546.0);
}

#[test]
fn charts_are_well_formed_and_escaped() {
    let blue = palette::SERIES[0];
    let b = bar_chart(
        "a<b",
        "x",
        &[Bar {
            label: "q&a".into(),
            value: -0.5,
            range: Some((-0.7, 0.2)),
            colour: blue,
        }],
        &[],
    );
    assert!(b.starts_with("<svg") && b.ends_with("</svg>"));
    assert!(b.contains("a&lt;b") && b.contains("q&amp;a"));
    assert!(!b.contains("NaN"));
    let s = stacked_bars(
        "t",
        "u",
        &[
            ("a".into(), palette::category(0)),
            ("b".into(), palette::category(1)),
        ],
        &[StackRow {
            label: "r".into(),
            values: vec![1.0, -0.5],
            total_range: Some((0.8, 1.3)),
            notes: vec!["1 [0.9–1.1]".into()],
        }],
    );
    assert_eq!(s.matches("class=\"seg\"").count(), 2);
    assert_eq!(s.matches("class=\"whisker\"").count(), 1);
    assert!(s.contains(palette::category(1).hex()) && s.contains("1 [0.9–1.1]"));
    let l = line_chart(
        "t",
        "x",
        "y",
        &[Line {
            name: "m".into(),
            points: vec![(1.0, 1.0), (2.0, 1.8)],
            dashed: true,
            colour: palette::SERIES[2],
            ranges: vec![(0.9, 1.1), (1.5, 2.0)],
        }],
    );
    assert!(l.contains("polyline") && !l.contains("NaN"));
    assert_eq!(l.matches("class=\"whisker\"").count(), 2);
    assert!(l.contains(palette::SERIES[2].hex()));
    let h = histogram("h", "exits", &[(1024, 5), (2048, 9)], &("vm".into(), blue));
    assert_eq!(h.matches("class=\"bin\"").count(), 2);
    let sc = xy_scatter(
        "s",
        "measured",
        "predicted",
        true,
        &[("slowdown".into(), blue)],
        &[
            ScatterPoint {
                colour: blue,
                x: 1.0,
                y: 0.8,
                x_range: Some((0.9, 1.2)),
                y_range: Some((0.8, 0.8)),
                label: "x".into(),
            },
            ScatterPoint {
                colour: blue,
                x: 2.0,
                y: 2.1,
                x_range: None,
                y_range: Some((1.9, 2.3)),
                label: "y".into(),
            },
        ],
    );
    assert_eq!(sc.matches("class=\"pt\"").count(), 2);
    // Zero-width ranges (one repetition) draw no whisker.
    assert_eq!(sc.matches("class=\"whisker\"").count(), 2);
    let rows = [
        IntervalRow {
            label: "vm <dedup>".into(),
            median: 35.0,
            lo: 30.0,
            hi: 41.0,
            quartiles: None,
            colour: blue,
            note: String::new(),
        },
        IntervalRow {
            label: "sim".into(),
            median: f64::NAN,
            lo: 0.0,
            hi: 1.0,
            quartiles: Some((1.0, 2.0)),
            colour: palette::SERIES[2],
            note: String::new(),
        },
    ];
    let ic = interval_chart("i", "slowdown %", &rows, &[("vm".into(), blue)]);
    assert_eq!(
        ic.matches("class=\"whisker\"").count(),
        1,
        "NaN rows are not drawn"
    );
    assert!(ic.contains("vm &lt;dedup&gt;") && !ic.contains("NaN"));
}
