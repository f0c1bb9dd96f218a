//! The digest of a worker's set of task ids (`current_tasks_digest`,
//! `active_tasks_digest` of `WorkerHeartbeat`).
//!
//! A worker heartbeat used to carry every task id the worker runs, every
//! heartbeat: with N workers running T tasks each, N × T ids a heartbeat interval
//! to encode, decode and merge, although almost every heartbeat changes nothing.
//! So the dispatcher names the digest of the set it wants the worker to run, and a
//! worker whose set has that digest sends the digest instead of the list. Both
//! ends compute it here, so they agree.
//!
//! The digest is a sum of a mixed value per id, so it does not depend on the
//! order of the ids (a worker keeps its tasks in a hash map, the dispatcher in a
//! sorted set), and it covers the count. It is not a cryptographic hash: a
//! worker only ever describes its own tasks, and a collision would leave that
//! one worker running a stale set until its next change. Never 0 (0 is "not
//! computed", from an older peer).

/// The digest of the set of task ids `ids` (each id once; any order).
pub fn task_set_digest(ids: impl IntoIterator<Item = u64>) -> u64 {
    let (count, sum) =
        ids.into_iter().fold((0u64, 0u64), |(n, sum), id| (n + 1, sum.wrapping_add(mix(id))));
    mix(sum ^ mix(count.wrapping_add(0x5eed))).max(1)
}

/// A 64-bit finaliser (xor-shift-multiply rounds): nearby ids land far apart, so
/// the sum of a set does not equal the sum of another small set by accident.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::task_set_digest;

    #[test]
    fn the_digest_depends_on_the_set_not_its_order() {
        let a = task_set_digest([3, 1, 2]);
        assert_eq!(a, task_set_digest([1, 2, 3]));
        assert_ne!(a, task_set_digest([1, 2]), "one id fewer");
        assert_ne!(a, task_set_digest([1, 2, 4]), "one id changed");
        assert_ne!(task_set_digest([]), 0, "0 means not computed");
        assert_ne!(task_set_digest([]), task_set_digest([0]), "the empty set is not {{0}}");
    }
}
