use std::fs;
use std::os::unix::fs::symlink;

use super::*;

fn touch(p: &Path) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, b"x").unwrap();
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[test]
fn it_lists_what_glob_lists_for_plain_patterns() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    for f in ["a.txt", "b.txt", "c.bin", "sub/d.txt", "sub/deeper/e.txt", "other/f.txt"] {
        touch(&root.join(f));
    }
    fs::create_dir_all(root.join("dir.txt")).unwrap();
    let budget = ListBudget::default();
    for pat in ["*.txt", "sub/*.txt", "*/*.txt", "**/*.txt", "s?b/**/*.txt", "a.txt", "[ab].txt"] {
        let pattern = format!("{}/{pat}", root.display());
        let ours = sorted(list(&pattern, &budget).unwrap());
        let theirs: Vec<String> = glob::glob(&pattern)
            .unwrap()
            .map(|p| p.unwrap())
            .filter(|p| p.is_file())
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(ours, sorted(theirs), "{pat}");
    }
    assert!(list(&format!("{}/missing.txt", root.display()), &budget).unwrap().is_empty());
    let climbs = format!("{}/*/../a.txt", root.display());
    let err = list(&climbs, &budget).unwrap_err().to_string();
    assert!(err.contains("`..` after a glob"), "{err}");
}

#[test]
fn a_symlink_loop_under_a_double_star_is_walked_once_and_ends() {
    // Issue 31, defect 7: `glob::glob` walked this for as long as it was let.
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    touch(&root.join("a/x.txt"));
    symlink(root, root.join("a/loop")).unwrap();
    symlink(root.join("a"), root.join("a/self")).unwrap();
    let pattern = format!("{}/**/*.txt", root.display());
    let got = list(&pattern, &ListBudget::default()).unwrap();
    assert_eq!(got, [root.join("a/x.txt").display().to_string()]);
}

#[test]
fn a_walk_stops_at_the_depth_bound() {
    let d = tempfile::tempdir().unwrap();
    let mut deep = d.path().to_path_buf();
    for _ in 0..MAX_LIST_DEPTH + 3 {
        deep.push("d");
    }
    touch(&deep.join("far.txt"));
    touch(&d.path().join("d/near.txt"));
    let got = list(&format!("{}/**/*.txt", d.path().display()), &ListBudget::default()).unwrap();
    assert_eq!(got, [d.path().join("d/near.txt").display().to_string()]);
}

#[test]
fn a_cancelled_or_expired_budget_stops_the_walk_with_an_error_naming_the_pattern() {
    let d = tempfile::tempdir().unwrap();
    for i in 0..600 {
        touch(&d.path().join(format!("f{i}.txt")));
    }
    let pattern = format!("{}/*.txt", d.path().display());
    let cancelled = ListBudget::default();
    cancelled.cancel();
    let err = list(&pattern, &cancelled).unwrap_err().to_string();
    assert!(err.contains("cancelled") && err.contains(&pattern), "{err}");
    let expired = ListBudget::new(Duration::ZERO);
    let err = list(&pattern, &expired).unwrap_err().to_string();
    assert!(err.contains("deadline") && err.contains("narrow the pattern"), "{err}");
}
