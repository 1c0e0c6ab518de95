//! `tensorfold pull SPEC`: fetch a model into the cache (when missing) and print its path.

use anyhow::Result;
use clap::Args;

use crate::load;
use crate::GlobalArgs;

#[derive(Args, Debug)]
pub struct PullArgs {
    /// A catalogue name (see `tensorfold models`), a local file, or owner/repo/file.gguf on the
    /// Hugging Face Hub.
    #[arg(value_name = "SPEC")]
    pub spec: String,
}

pub fn run(args: &PullArgs, global: &GlobalArgs) -> Result<()> {
    let path = load::resolve(&args.spec, global)?;
    println!("{}", path.display());
    Ok(())
}
