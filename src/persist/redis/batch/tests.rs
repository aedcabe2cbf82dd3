//! Unit tests of a batch's commands as the builder writes them.

use bytes::Bytes;
use redis::Arg;

use super::super::call::LARGE_WORDS;
use super::*;
use crate::redis::fenced_script::word_head_len;
use crate::store::memory::{CutLimit, MemoryStore};
use crate::store::{NANOS_PER_SEC, NewJob};

/// Each command of `b` as its words (after the call's eight words of fence), taken
/// apart as the script does: MessagePack strings in one argument, or a word count
/// and that many arguments.
fn commands(b: &Batch) -> Vec<Vec<Vec<u8>>> {
    let mut args = b.call.args_iter().skip(8).map(|a| match a {
        Arg::Simple(a) => a,
        _ => panic!("a cursor argument"),
    });
    let mut out = Vec::new();
    while let Some(mut a) = args.next() {
        let mut words = Vec::new();
        if a[0] < 128 {
            let n: usize = std::str::from_utf8(a).unwrap().parse().unwrap();
            words.extend(args.by_ref().take(n).map(<[u8]>::to_vec));
            a = &[];
        }
        while !a.is_empty() {
            let head = word_head_len(a[0]);
            let len = match head {
                1 => usize::from(a[0] & 0x1f),
                2 => usize::from(a[1]),
                3 => usize::from(u16::from_be_bytes([a[1], a[2]])),
                _ => u32::from_be_bytes([a[1], a[2], a[3], a[4]]) as usize,
            };
            words.push(a[head..head + len].to_vec());
            a = &a[head + len..];
        }
        out.push(words);
    }
    out
}

/// A job whose body was written ahead gets its tube, metadata and sets from its batch,
/// not its body again, and leaves the `ahead` set.
#[test]
fn a_job_whose_body_was_written_ahead_is_written_without_it() {
    let s = MemoryStore::journaled();
    let tube = TubeName::new(b"big").unwrap();
    s.cut(CutLimit::default());
    let (id, _) = s.begin_staged(&tube);
    let body = Bytes::from(vec![b'x'; 64]);
    let job = NewJob {
        tube: tube.clone(),
        pri: 1,
        delay_ms: 0,
        ttr_ms: 60_000,
        body: body.clone(),
    };
    s.put_staged(id, job, 1_700_000_000 * NANOS_PER_SEC, true);
    let cut = s.cut(CutLimit::default());
    let keys = Keys::new("p");
    let b = built(&keys, &cut);
    let cmds = commands(&b);
    let job_key = keys.job(id).into_bytes();
    let hset: Vec<_> = cmds
        .iter()
        .filter(|c| c[0] == b"HSET" && c[1] == job_key)
        .collect();
    assert_eq!(hset.len(), 1, "{cmds:?}");
    let fields: Vec<&[u8]> = hset[0][2..].iter().step_by(2).map(|f| &f[..]).collect();
    assert_eq!(fields, [&b"t"[..], b"m"], "the tube and metadata only");
    assert_eq!(hset[0][3], b"big");
    let ahead = keys.ns(NsKey::Ahead).as_bytes().to_vec();
    assert!(
        cmds.iter()
            .any(|c| c[0] == b"ZREM" && c[1] == ahead && c[2] == id.to_string().into_bytes()),
        "still in the ahead set: {cmds:?}"
    );
    assert!(
        cmds.iter().all(|c| !c.contains(&body.to_vec())),
        "the body was written again"
    );
}

/// A job changed after Redis holds it is written as its metadata alone; a deleted
/// job's hash goes in one DEL with the others'.
#[tokio::test]
async fn a_changed_job_writes_its_metadata_and_deleted_ones_one_del() {
    use crate::store::{ConnId, Store};
    let (s, ids) = three_jobs(8);
    s.cut(CutLimit::default());
    let now = 1_700_000_001 * NANOS_PER_SEC;
    let conn = ConnId(1);
    assert!(s.reserve_job(conn, ids[0], now).await.unwrap().is_some());
    assert!(s.bury(conn, ids[0], 1, now).await.unwrap());
    assert!(s.delete(conn, ids[1], now).await.unwrap());
    assert!(s.delete(conn, ids[2], now).await.unwrap());
    let cut = s.cut(CutLimit::default());
    let keys = Keys::new("p");
    let b = built(&keys, &cut);
    let cmds = commands(&b);
    let first = keys.job(ids[0]).into_bytes();
    let hset: Vec<_> = cmds
        .iter()
        .filter(|c| c[0] == b"HSET" && c[1] == first)
        .collect();
    assert_eq!(hset.len(), 1, "{cmds:?}");
    assert_eq!(hset[0].len(), 4, "HSET key m <meta>: {:?}", hset[0]);
    assert_eq!(hset[0][2], b"m");
    let del: Vec<_> = cmds.iter().filter(|c| c[0] == b"DEL").collect();
    assert_eq!(del.len(), 1, "{cmds:?}");
    let mut gone = del[0][1..].to_vec();
    gone.sort();
    let mut want = vec![keys.job(ids[1]).into_bytes(), keys.job(ids[2]).into_bytes()];
    want.sort();
    assert_eq!(gone, want);
}

/// A tick's cursor is written by the call that writes its job (one script, atomic),
/// a dropped cursor by an HDEL there.
#[tokio::test]
async fn a_ticks_cursor_is_in_the_call_of_its_job() {
    use crate::store::{Fired, ScheduleName, Store, TickPut};
    let s = MemoryStore::journaled();
    s.cut(CutLimit::default());
    let tick = |name: &str| TickPut {
        schedule: ScheduleName::new(name).unwrap(),
        tick_ms: 5000,
        job: NewJob {
            tube: TubeName::new(b"cron").unwrap(),
            pri: 1,
            delay_ms: 0,
            ttr_ms: 60_000,
            body: Bytes::from_static(b"tick"),
        },
        key: None,
        skipped: 0,
    };
    let now = 1_700_000_000 * NANOS_PER_SEC;
    s.fire_tick(&tick("old"), now).await.unwrap();
    s.cut(CutLimit::default());
    let Fired::Made(id) = s.fire_tick(&tick("new"), now).await.unwrap() else {
        panic!("no job made");
    };
    s.drop_cursor(&ScheduleName::new("old").unwrap())
        .await
        .unwrap();
    let cut = s.cut(CutLimit::default());
    let keys = Keys::new("p");
    let b = built(&keys, &cut);
    let cmds = commands(&b);
    let cursors = keys.schedule_cursors().into_bytes();
    let job = keys.job(id).into_bytes();
    assert!(cmds.iter().any(|c| c[0] == b"HSET" && c[1] == job));
    let want = format!("5000 {id} 1 0 0").into_bytes();
    assert!(
        cmds.iter().any(|c| c[0] == b"HSET"
            && c[1] == cursors
            && c[2..] == [b"new".to_vec(), want.clone()])
    );
    assert!(
        cmds.iter()
            .any(|c| c[0] == b"HDEL" && c[1] == cursors && c[2..] == [b"old".to_vec()])
    );
}

/// The batch a fresh builder makes of `cut`, as if Redis held nothing of it before.
fn built(keys: &Keys, cut: &Cut) -> Batch {
    Builder::default().build(
        batch_call(keys),
        keys,
        "owner",
        cut,
        &mut Written::default(),
    )
}

/// The head of a batch's script call (`BatchFence::begin`'s shape) for `keys`.
fn batch_call(keys: &Keys) -> redis::Cmd {
    let mut call = redis::cmd("EVALSHA");
    call.arg("sha")
        .arg(2)
        .arg(keys.leader())
        .arg(keys.commit())
        .arg("token")
        .arg(1)
        .arg("");
    call
}

/// The bodies go into the call straight from their jobs, each once, in its job's
/// HSET: small ones MessagePack-encoded, large ones as arguments of their own.
#[test]
fn each_body_is_in_the_call_once_in_its_jobs_hash() {
    each_body_once(100, false);
    each_body_once(LARGE_WORDS * 4, true);
}

/// A journaled store with three jobs put in tube `t` since its last cut, bodies of
/// `size` bytes (`a`s, `b`s, `c`s); their ids.
fn three_jobs(size: usize) -> (MemoryStore, Vec<u64>) {
    let s = MemoryStore::journaled();
    let tube = TubeName::new(b"t").unwrap();
    s.cut(CutLimit::default());
    let mut ids = Vec::new();
    for n in 0..3u8 {
        let job = NewJob {
            tube: tube.clone(),
            pri: 1,
            delay_ms: 0,
            ttr_ms: 60_000,
            body: Bytes::from(vec![b'a' + n; size]),
        };
        let (id, _) = s.begin_staged(&tube);
        s.put_staged(id, job, 1_700_000_000 * NANOS_PER_SEC, false);
        ids.push(id);
    }
    (s, ids)
}

/// Bodies of `size` bytes, as arguments of their own (`raw`) or encoded.
fn each_body_once(size: usize, raw: bool) {
    let (s, ids) = three_jobs(size);
    let cut = s.cut(CutLimit::default());
    let keys = Keys::new("p");
    let b = built(&keys, &cut);
    let cmds = commands(&b);
    for (id, n) in ids.iter().zip(0u8..) {
        let key = keys.job(*id).into_bytes();
        let hset: Vec<_> = cmds
            .iter()
            .filter(|c| c[0] == b"HSET" && c[1] == key)
            .collect();
        assert_eq!(hset.len(), 1, "{cmds:?}");
        let fields: Vec<(&[u8], &[u8])> = hset[0][2..]
            .chunks(2)
            .map(|p| (&p[0][..], &p[1][..]))
            .collect();
        assert_eq!(fields[0], (&b"t"[..], &b"t"[..]));
        assert_eq!(fields[1].0, b"m");
        assert_eq!(fields[2], (&b"b"[..], &vec![b'a' + n; size][..]));
        let copies = cmds
            .iter()
            .flatten()
            .filter(|w| **w == vec![b'a' + n; size])
            .count();
        assert_eq!(copies, 1, "body {n} copied {copies} times");
    }
    // Only a word count or a raw word begins with a byte under 128.
    let raw_args = b
        .call
        .args_iter()
        .skip(8)
        .any(|a| matches!(a, Arg::Simple(a) if a[0] < 128));
    assert_eq!(raw_args, raw, "{size}-byte bodies");
}
