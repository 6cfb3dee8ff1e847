//! Loads reports in headless Chromium: the findings section names the run's
//! workloads, the plots are in the DOM, the first screen is not blank (kept as
//! `target/test-artefacts/report-first-screen.png` for review), and the
//! report of a 10,000-run simulator sweep (as 2,000 configurations × 5
//! repetitions and as 10,000 configurations) loads in under 3 s, the times
//! kept in `target/test-artefacts/report-load-time.txt`. Without Chromium
//! the test passes with a note, unless SMPLAB_REQUIRE_BROWSER=1 (CI), where it
//! fails.

use crate::tests::{big_sim_store, sample_store_with_diagnosis};
use crate::{write_report, ReportOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

fn headless(browser: &str, profile: &Path) -> Command {
    let mut c = Command::new(browser);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

/// Where test artefacts for review go: `target/test-artefacts/`.
fn artefacts() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    let dir = target.join("test-artefacts");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// The rendered DOM of `url` after its load event.
fn dump_dom(browser: &str, profile: &Path, url: &str) -> String {
    let out = headless(browser, profile)
        .arg("--dump-dom")
        .arg(url)
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium --dump-dom failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The page's own load time: the report's script writes `data-load-ms`
/// (navigation start to the load event, layout forced) on the root element.
fn load_ms(dom: &str) -> f64 {
    let at = dom
        .find("data-load-ms=\"")
        .expect("the report's script recorded its load time");
    let rest = &dom[at + "data-load-ms=\"".len()..];
    rest[..rest.find('"').expect("attribute closes")]
        .parse()
        .expect("a number of milliseconds")
}

fn screenshot_checks(png_path: &Path) {
    let decoder = png::Decoder::new(std::fs::File::open(png_path).expect("screenshot written"));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("PNG decodes");
    let bytes = &buf[..info.buffer_size()];
    let channels = info.color_type.samples();
    assert!(info.width >= 1000 && info.height >= 700);
    // Luma variance and the share of non-white pixels: a blank page has neither.
    let (mut n, mut sum, mut sum2, mut inked) = (0f64, 0f64, 0f64, 0usize);
    let mut colours = std::collections::HashSet::new();
    for px in bytes.chunks(channels) {
        let (r, g, b) = if channels >= 3 {
            (px[0], px[1], px[2])
        } else {
            (px[0], px[0], px[0])
        };
        let y = 0.299 * r as f64 + 0.587 * g as f64 + 0.114 * b as f64;
        n += 1.0;
        sum += y;
        sum2 += y * y;
        if y < 200.0 {
            inked += 1;
        }
        if colours.len() < 64 {
            colours.insert((r, g, b));
        }
    }
    let var = sum2 / n - (sum / n).powi(2);
    assert!(
        var > 100.0,
        "screenshot looks blank (luma variance {var:.1})"
    );
    assert!(
        inked as f64 / n > 0.01,
        "screenshot has almost no drawn pixels"
    );
    assert!(
        colours.len() >= 5,
        "screenshot has only {} colours; plots are coloured",
        colours.len()
    );
}

#[test]
fn report_renders_in_headless_chromium() {
    let Some(browser) = chromium() else {
        if std::env::var("SMPLAB_REQUIRE_BROWSER").as_deref() == Ok("1") {
            panic!("SMPLAB_REQUIRE_BROWSER=1 but chromium is not installed: apt-get install -y chromium");
        }
        eprintln!("note: chromium not installed; report rendering not checked (set SMPLAB_REQUIRE_BROWSER=1 to make this fail)");
        return;
    };
    let dir = smplab_experiment::testutil::temp_dir("browser");
    let files = write_report(
        &sample_store_with_diagnosis(),
        &dir.join("report"),
        &ReportOptions::default(),
    )
    .expect("report written");
    let url = format!("file://{}", files.html.display());

    let dom = dump_dom(browser, &dir.join("profile-dom"), &url);
    // The findings come first and name every workload of the run.
    let findings = dom
        .find("<section id=\"findings\">")
        .expect("a findings section in the rendered DOM");
    assert!(
        dom.find("<section").is_some_and(|first| first == findings),
        "findings are the first section"
    );
    let end = dom[findings..]
        .find("</section>")
        .map_or(dom.len(), |e| findings + e);
    for w in ["dedup", "streamcluster", "blackscholes"] {
        assert!(
            dom[findings..end].contains(&format!("id=\"finding-{w}\"")),
            "the findings do not name {w}"
        );
    }
    let svgs = dom.matches("<svg").count();
    assert!(
        svgs >= 8,
        "expected the plots in the DOM, found {svgs} <svg> elements"
    );
    for class in [
        "class=\"pt\"",
        "class=\"whisker\"",
        "class=\"series\"",
        "class=\"seg\"",
        "class=\"bin\"",
    ] {
        assert!(
            dom.contains(class),
            "no {class} element in the rendered DOM"
        );
    }

    // The first screen at a laptop's size, kept for review.
    let shot = artefacts().join("report-first-screen.png");
    let out = headless(browser, &dir.join("profile-shot"))
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1366,768")
        .arg(&url)
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium --screenshot failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    screenshot_checks(&shot);
    eprintln!("first screen: {}", shot.display());
}

#[test]
fn ten_thousand_point_report_loads_in_under_three_seconds() {
    let Some(browser) = chromium() else {
        if std::env::var("SMPLAB_REQUIRE_BROWSER").as_deref() == Ok("1") {
            panic!("SMPLAB_REQUIRE_BROWSER=1 but chromium is not installed: apt-get install -y chromium");
        }
        eprintln!("note: chromium not installed; load time not measured");
        return;
    };
    let dir = smplab_experiment::testutil::temp_dir("browser-big");
    let small = write_report(
        &crate::tests::sample_store(),
        &dir.join("small"),
        &ReportOptions::default(),
    )
    .expect("report written");
    // Baseline in the same run: the small sample report, same browser. The
    // fastest of three loads each: the host is shared, and interference only
    // ever adds time.
    let url = |p: &Path| format!("file://{}", p.display());
    let fastest = |html: &Path, tag: &str| {
        (0..3)
            .map(|i| {
                let dom = dump_dom(browser, &dir.join(format!("{tag}{i}")), &url(html));
                (load_ms(&dom), dom)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .expect("three loads")
    };
    let (small_ms, _) = fastest(&small.html, "small");
    let mut lines = String::new();
    // 10,000 runs as 2,000 configurations × 5 repetitions, and as 10,000
    // configurations run once (the raw-data table's worst case).
    for (reps, configs) in [(5u32, 2_000usize), (1, 10_000)] {
        let store = big_sim_store(10_000, reps);
        let big = write_report(
            &store,
            &dir.join(format!("big{reps}")),
            &ReportOptions::default(),
        )
        .expect("report written");
        let (big_ms, dom) = fastest(&big.html, &format!("big{reps}-"));
        let size_kb = std::fs::metadata(&big.html).map_or(0, |m| m.len() / 1024);
        let line = format!(
            "10,000 simulator runs ({configs} configurations × {reps} repetition{}, {size_kb} kB): loaded in {big_ms:.0} ms; the small sample report in {small_ms:.0} ms ({:.1}x; fastest of 3 loads each)\n",
            if reps == 1 { "" } else { "s" },
            big_ms / small_ms.max(1.0)
        );
        eprint!("{line}");
        lines.push_str(&line);
        assert!(dom.contains("<section id=\"findings\">"));
        assert!(
            dom.matches("<tr><td>").count() >= configs,
            "every configuration is in the raw table"
        );
        assert!(
            big_ms < 3000.0,
            "the 10,000-run report ({configs} configurations) took {big_ms:.0} ms to load (limit 3 s)"
        );
        if reps == 1 {
            // Its first screen, for review: aggregated, not 10,000 marks.
            let shot = artefacts().join("report-10k-first-screen.png");
            let out = headless(browser, &dir.join("profile-big-shot"))
                .arg(format!("--screenshot={}", shot.display()))
                .arg("--window-size=1366,768")
                .arg(url(&big.html))
                .output()
                .expect("chromium runs");
            assert!(out.status.success(), "chromium --screenshot failed");
            screenshot_checks(&shot);
        }
    }
    let _ = std::fs::write(artefacts().join("report-load-time.txt"), &lines);
}
