//! `strata-node`: one Strata replica. `strata-node --help` lists the flags; a TOML file given
//! with `--config` supplies anything the flags do not.
//!
//! Exit codes: 0 after a clean shutdown (SIGTERM / Ctrl-C), 1 if the node could not start,
//! 2 if the configuration is invalid.

use clap::Parser;
use strata_node::NodeArgs;

#[derive(Parser, Debug)]
#[command(name = "strata-node", version, about = "Run one Strata replica")]
struct Cli {
    #[command(flatten)]
    node: NodeArgs,
}

fn main() {
    let cli = Cli::parse();
    let cfg = match cli.node.resolve() {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("strata-node: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = strata_node::run_blocking(cfg) {
        eprintln!("strata-node: {e}");
        std::process::exit(1);
    }
}
