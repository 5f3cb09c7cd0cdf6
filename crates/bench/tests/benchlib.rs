//! The benchmark scripts' Python library (`scripts/benchlib`: the medians and ratios every
//! table in docs/benchmarks.md comes from, and the Kairos bounds) has unit tests of its own;
//! this runs them with the workspace's tests, so that CI runs them too.

use std::path::Path;
use std::process::Command;

#[test]
fn the_benchlib_python_tests_pass() {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts");
    let out = Command::new("python3")
        .args(["-m", "unittest", "discover", "-s", ".", "-p", "test_*.py"])
        .current_dir(&scripts)
        .output()
        .expect("python3 runs (the benchmark scripts need it: apt-get install python3)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "scripts/benchlib's tests failed:\n{stderr}");
    // unittest reports on stderr; an empty discovery would also "succeed".
    assert!(
        !stderr.contains("Ran 0 tests"),
        "no test found under {}:\n{stderr}",
        scripts.display()
    );
}
