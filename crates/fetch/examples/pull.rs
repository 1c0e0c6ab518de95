//! `cargo run -p tf-fetch --example pull -- SPEC [CACHE_DIR]`: resolves SPEC like
//! `tensorfold pull` and prints the final path (a debugging aid for this crate alone).

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(spec) = args.next() else {
        eprintln!(
            "usage: pull SPEC [CACHE_DIR]\nmodels: {}",
            tf_fetch::known_names()
        );
        std::process::exit(2);
    };
    let cache = args.next().map(std::path::PathBuf::from);
    let opts = tf_fetch::PullOptions::new(tf_fetch::cache_dir(cache.as_deref()));
    match tf_fetch::resolve(&spec, &opts) {
        Ok(path) => println!("{}", path.display()),
        Err(err) => {
            eprintln!("error: {err}");
            std::process::exit(1);
        }
    }
}
