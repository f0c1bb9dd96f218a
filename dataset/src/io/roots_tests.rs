//! Data roots: what they admit and what they refuse (real files and symlinks in a
//! temp dir; object URLs are checked without a store).

use std::os::unix::fs::symlink;

use super::*;

fn forbidden(r: Result<impl fmt::Debug, DatasetError>, name: &str) {
    match r {
        Err(DatasetError::Forbidden { file, message }) => {
            assert_eq!(file, name);
            assert!(message.contains(DATA_ROOTS_FLAG), "{message}");
        }
        other => panic!("{name}: expected Forbidden, got {other:?}"),
    }
}

struct Tree {
    _dir: tempfile::TempDir,
    root: String,
    outside: String,
}

/// `<tmp>/root/{a.txt,sub/b.txt}` and `<tmp>/outside/secret.txt`.
fn tree() -> Tree {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = dir.path().canonicalize().expect("canonical");
    let root = base.join("root");
    std::fs::create_dir_all(root.join("sub")).expect("mkdir");
    std::fs::write(root.join("a.txt"), "a").expect("write");
    std::fs::write(root.join("sub/b.txt"), "b").expect("write");
    let outside = base.join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    std::fs::write(outside.join("secret.txt"), "s").expect("write");
    let s = |p: PathBuf| p.to_string_lossy().into_owned();
    Tree { _dir: dir, root: s(root), outside: s(outside) }
}

#[test]
fn files_under_a_root_are_admitted_and_opened_by_their_canonical_path() {
    let t = tree();
    let roots = DataRoots::parse(&format!("file://{}", t.root)).expect("roots");
    let a = format!("{}/a.txt", t.root);
    assert_eq!(roots.check(&a).expect("admitted"), a);
    assert_eq!(roots.check(&format!("file://{a}")).expect("admitted"), a);
    let dotted = format!("{}/sub/../a.txt", t.root);
    assert_eq!(roots.check(&dotted).expect("admitted"), a);
    // Not yet written: checked by its existing ancestor.
    assert!(roots.check(&format!("{}/new/x.txt", t.root)).is_ok());
}

#[test]
fn dot_dot_and_symlinks_do_not_escape_a_root() {
    let t = tree();
    let roots = DataRoots::parse(&t.root).expect("roots");
    let up = format!("{}/../outside/secret.txt", t.root);
    forbidden(roots.check(&up), &up);
    let up_missing = format!("{}/nothing/../../outside/secret.txt", t.root);
    forbidden(roots.check(&up_missing), &up_missing);
    let link = format!("{}/link.txt", t.root);
    symlink(format!("{}/secret.txt", t.outside), &link).expect("symlink");
    forbidden(roots.check(&link), &link);
    let dir_link = format!("{}/out", t.root);
    symlink(&t.outside, &dir_link).expect("symlink");
    forbidden(roots.check(&format!("{dir_link}/secret.txt")), &format!("{dir_link}/secret.txt"));
    // A sibling that shares the root's name as a prefix is not under it.
    let sibling = format!("{}-secret", t.root);
    std::fs::create_dir_all(&sibling).expect("mkdir");
    forbidden(roots.check(&format!("{sibling}/x")), &format!("{sibling}/x"));
    // And opening goes through the same check.
    forbidden(super::super::open_in(&link, &roots).map(drop), &link);
}

#[test]
fn a_glob_is_checked_by_its_fixed_directory_and_every_match() {
    let t = tree();
    let roots = DataRoots::parse(&t.root).expect("roots");
    let pattern = format!("{}/*.txt", t.root);
    assert_eq!(super::super::list_files_in(&pattern, &roots).expect("lists").len(), 1);
    forbidden(roots.check_pattern("/etc/*"), "/etc/*");
    forbidden(roots.check_pattern("/*/passwd"), "/*/passwd");
    let up = format!("{}/../outside/*", t.root);
    forbidden(roots.check_pattern(&up), &up);
    // A match that is a symlink out of the root fails the listing, naming it.
    let link = format!("{}/z.txt", t.root);
    symlink(format!("{}/secret.txt", t.outside), &link).expect("symlink");
    forbidden(super::super::list_files_in(&pattern, &roots), &link);
    // `..` after the glob: the fixed directory is inside, the matches are not.
    let sneaky = format!("{}/*/../../outside/secret.txt", t.root);
    let listed = super::super::list_files_in(&sneaky, &roots);
    assert!(matches!(listed, Err(DatasetError::Forbidden { .. })), "{listed:?}");
}

#[test]
fn object_roots_match_bucket_and_prefix_on_segment_boundaries() {
    let roots = DataRoots::parse("s3://b/data, gs://g").expect("roots");
    assert!(roots.check("s3://b/data/x.tfrecord").is_ok());
    assert!(roots.check("s3://b/data").is_ok());
    assert!(roots.check("gs://g/anything/at/all").is_ok());
    forbidden(roots.check("s3://b/data-secret/x"), "s3://b/data-secret/x");
    forbidden(roots.check("s3://b/other/x"), "s3://b/other/x");
    forbidden(roots.check("s3://c/data/x"), "s3://c/data/x");
    forbidden(roots.check("gs://b/data/x"), "gs://b/data/x");
    forbidden(roots.check("s3://b/data/../secret"), "s3://b/data/../secret");
    assert!(roots.check_pattern("s3://b/data/*.tfrecord").is_ok());
    forbidden(roots.check_pattern("s3://b/data*"), "s3://b/data*");
    forbidden(roots.check_pattern("s3://b/*/x"), "s3://b/*/x");
    // Local files are refused by object-only roots.
    forbidden(roots.check("/tmp/x"), "/tmp/x");
}

#[test]
fn the_loopback_defaults_refuse_system_files_and_off_loopback_admits_nothing() {
    let defaults = DataRoots::defaults(true);
    forbidden(defaults.check("/etc/passwd"), "/etc/passwd");
    forbidden(defaults.check("/proc/self/environ"), "/proc/self/environ");
    let tmp = std::env::temp_dir().join("sluice-roots-test.txt");
    assert!(defaults.check(&tmp.to_string_lossy()).is_ok(), "{defaults}");
    assert!(defaults.check("relative/in/cwd.txt").is_ok(), "{defaults}");
    let none = DataRoots::defaults(false);
    forbidden(none.check(&tmp.to_string_lossy()), &tmp.to_string_lossy());
    assert!(DataRoots::unrestricted().check("/etc/passwd").is_ok());
}

#[test]
fn bad_roots_are_refused_naming_the_flag() {
    for bad in ["/no/such/dir/for/sluice", "ftp://x/y", "file://relative", "s3://"] {
        let err = DataRoots::parse(bad).expect_err(bad).to_string();
        assert!(err.contains(bad) && err.contains("--data-roots"), "{err}");
    }
    assert_eq!(DataRoots::parse("").expect("empty"), DataRoots::none());
}
