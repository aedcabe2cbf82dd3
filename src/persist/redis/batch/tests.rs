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

/// A job whose body was written ahead gets its metadata, sets and index entry from
/// its batch, and not its body again.
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
    let call = batch_call(&keys);
    let b = Builder::default().build(call, &keys, "owner", &cut, &mut Written::default());
    let cmds = commands(&b);
    let id_text = id.to_string().into_bytes();
    let index = keys.ns(NsKey::Index).as_bytes().to_vec();
    assert!(
        cmds.iter()
            .any(|c| c[0] == b"HSET" && c[1] == index && c[2] == id_text),
        "no index entry"
    );
    let jobs = keys.tube_key("big", TubeKey::Jobs).into_bytes();
    assert!(cmds.iter().any(|c| c[0] == b"HSET" && c[1] == jobs));
    assert!(
        cmds.iter().all(|c| !c.contains(&body.to_vec())),
        "the body was written again"
    );
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
    let b = Builder::default().build(
        batch_call(&keys),
        &keys,
        "owner",
        &cut,
        &mut Written::default(),
    );
    let cmds = commands(&b);
    let cursors = keys.schedule_cursors().into_bytes();
    let jobs = keys.tube_key("cron", TubeKey::Jobs).into_bytes();
    let id_text = id.to_string().into_bytes();
    assert!(
        cmds.iter()
            .any(|c| c[0] == b"HSET" && c[1] == jobs && c[2] == id_text)
    );
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

/// The bodies go into the call straight from their jobs, each once,
/// next to its id, in one HSET per tube: small ones MessagePack-encoded, large ones
/// as arguments of their own.
#[test]
fn each_body_is_in_the_call_once_next_to_its_id() {
    each_body_once(100, false);
    each_body_once(LARGE_WORDS * 4, true);
}

/// Bodies of `size` bytes, as arguments of their own (`raw`) or encoded.
fn each_body_once(size: usize, raw: bool) {
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
    let cut = s.cut(CutLimit::default());
    let keys = Keys::new("p");
    let call = batch_call(&keys);
    let b = Builder::default().build(call, &keys, "owner", &cut, &mut Written::default());
    let cmds = commands(&b);
    let bodies = keys.tube_key("t", TubeKey::Bodies).into_bytes();
    let hset: Vec<_> = cmds
        .iter()
        .filter(|c| c[0] == b"HSET" && c[1] == bodies)
        .collect();
    assert_eq!(hset.len(), 1, "{cmds:?}");
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = hset[0][2..]
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    pairs.sort();
    let want: Vec<(Vec<u8>, Vec<u8>)> = ids
        .iter()
        .zip(0u8..)
        .map(|(id, n)| (id.to_string().into_bytes(), vec![b'a' + n; size]))
        .collect();
    assert_eq!(pairs, want);
    // Only a word count or a raw word begins with a byte under 128.
    let raw_args = b
        .call
        .args_iter()
        .skip(8)
        .any(|a| matches!(a, Arg::Simple(a) if a[0] < 128));
    assert_eq!(raw_args, raw, "{size}-byte bodies");
}
