//! `cache_dir` precedence. The only test in this binary, so changing the environment races with
//! nothing.

use std::path::{Path, PathBuf};

use tf_fetch::cache_dir;

#[test]
fn flag_then_tensorfold_cache_then_xdg_then_home() {
    std::env::set_var("TENSORFOLD_CACHE", "/tf-cache");
    std::env::set_var("XDG_CACHE_HOME", "/xdg");
    std::env::set_var("HOME", "/home/someone");
    assert_eq!(cache_dir(Some(Path::new("/flag"))), PathBuf::from("/flag"));
    assert_eq!(cache_dir(None), PathBuf::from("/tf-cache"));

    std::env::remove_var("TENSORFOLD_CACHE");
    assert_eq!(cache_dir(None), PathBuf::from("/xdg/tensorfold"));

    // Empty counts as unset; a relative XDG_CACHE_HOME is invalid per the XDG spec.
    std::env::set_var("TENSORFOLD_CACHE", "");
    std::env::set_var("XDG_CACHE_HOME", "relative/dir");
    assert_eq!(
        cache_dir(None),
        PathBuf::from("/home/someone/.cache/tensorfold")
    );

    std::env::remove_var("XDG_CACHE_HOME");
    assert_eq!(
        cache_dir(None),
        PathBuf::from("/home/someone/.cache/tensorfold")
    );
    assert_eq!(
        tf_fetch::entry_path(tf_fetch::default_model(), &cache_dir(None)),
        PathBuf::from(
            "/home/someone/.cache/tensorfold/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
        )
    );
}
