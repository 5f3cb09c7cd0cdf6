//! `strata-plot SPEC.json OUT.png`: draws a chart spec (see `strata_bench::plot::Chart`) as a
//! PNG. The benchmark scripts write the specs with `python3 -m benchlib chart ...`; this is
//! their one plotting path, the same code that draws `strata bench --timeline`.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [spec, png] = args.as_slice() else {
        eprintln!("usage: strata-plot SPEC.json OUT.png");
        return ExitCode::from(2);
    };
    match strata_bench::plot::draw_file(&PathBuf::from(spec), &PathBuf::from(png)) {
        Ok(()) => {
            eprintln!("plot: {png}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("strata-plot: {e}");
            ExitCode::FAILURE
        }
    }
}
