//! Shared mode's commands on a job by its id alone (`stats-job`, `peek <id>`, the
//! operator API's job entry, `kick-job`, a `delete` by a connection that does not hold
//! the job), against a private redis-server: each is one script call, which finds the
//! job's tube in its hash, with no command sent before it to look the tube up. Counted
//! in what Redis' MONITOR shows of the store's own commands (a script's commands are
//! shown as `lua`'s, so only what crossed the network counts).

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::*;

/// An id no count or key index of a command can be mistaken for.
const FAR_ID: u64 = 9_000_001;

/// A MONITOR connection to the Redis at `url`: every command Redis runs from now on
/// arrives as one line.
struct Monitor {
    lines: tokio::io::Lines<BufReader<TcpStream>>,
    url: String,
}

impl Monitor {
    async fn start(url: &str) -> Monitor {
        let addr = url
            .trim_start_matches("redis://")
            .split('/')
            .next()
            .expect("an address in the url")
            .to_string();
        let mut stream = TcpStream::connect(&addr).await.expect("connect to redis");
        stream.write_all(b"MONITOR\r\n").await.expect("MONITOR");
        let mut lines = BufReader::new(stream).lines();
        let ok = lines.next_line().await.expect("read").expect("a reply");
        assert_eq!(ok, "+OK", "MONITOR refused");
        Monitor {
            lines,
            url: url.to_string(),
        }
    }

    /// The lines Redis ran, from the start until `ECHO <marker>` sent now on a
    /// connection of its own (Redis feeds a monitor in the order it runs commands, so
    /// every command run before the marker is among them).
    async fn until_marker(&mut self, marker: &str) -> Vec<String> {
        let client = redis::Client::open(self.url.as_str()).expect("redis url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect to redis");
        let _: String = redis::cmd("ECHO")
            .arg(marker)
            .query_async(&mut conn)
            .await
            .expect("ECHO");
        let mut seen = Vec::new();
        let wanted = format!("\"ECHO\" \"{marker}\"");
        loop {
            let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
                .await
                .expect("the marker within 60 s")
                .expect("read")
                .expect("the monitor open");
            if line.contains(&wanted) {
                return seen;
            }
            seen.push(line);
        }
    }
}

/// The commands of `lines` sent over the network (not run by a script) that name job
/// `id`: as an argument, or in its hash's key.
fn sent_naming(lines: &[String], id: JobId) -> Vec<String> {
    let arg = format!("\"{id}\"");
    let key = format!(":j:{id}\"");
    lines
        .iter()
        .filter(|l| !l.contains(" lua]"))
        .filter(|l| l.contains(&arg) || l.contains(&key))
        .cloned()
        .collect()
}

#[tokio::test]
async fn commands_by_id_are_one_script_call() {
    let Some(redis) = start_redis() else { return };
    let url = redis.url();
    let (store, prefix) = redis_store_with_prefix(&url, "by-id").await;
    let mut conn = redis::Client::open(url.as_str())
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to redis");
    let _: () = redis::cmd("SET")
        .arg(format!("{{{prefix}}}:ids"))
        .arg(FAR_ID - 1)
        .query_async(&mut conn)
        .await
        .expect("SET ids");
    let s = AnyStore::Redis(store);
    let id = put(&s, "by-id", 7, 0, LONG, "seen by id").await;
    assert_eq!(id, FAR_ID, "the id counter moved as set");

    let mut monitor = Monitor::start(&url).await;
    let info = job(&s, id).await;
    assert_eq!((info.tube.as_str(), info.pri), ("by-id", 7));
    let stats_job = sent_naming(&monitor.until_marker("stats-job").await, id);

    let peeked = peek_body(s.peek(id).await);
    assert_eq!(peeked, Some((id, "seen by id".to_string())));
    let peek = sent_naming(&monitor.until_marker("peek").await, id);

    let entry = s.job_entry(id, now(&s)).await.expect("job_entry");
    let entry = entry.expect("the job's entry");
    assert_eq!((entry.info.tube.as_str(), entry.body_size), ("by-id", 10));
    let job_entry = sent_naming(&monitor.until_marker("job entry").await, id);

    reserve_and_bury(&s, C1, id, 3).await;
    monitor.until_marker("buried").await;
    let kicked = s.kick_job(id, now(&s)).await.expect("kick_job");
    assert_eq!(kicked, Some(t("by-id")));
    let kick_job = sent_naming(&monitor.until_marker("kick-job").await, id);
    assert_eq!(state(&s, id).await, JobState::Ready);

    reserve_and_bury(&s, C1, id, 3).await;
    monitor.until_marker("buried again").await;
    assert!(
        delete(&s, C2, id).await,
        "a buried job is anyone's to delete"
    );
    assert!(s.job_info(id, now(&s)).await.expect("job_info").is_none());
    let deleted = sent_naming(&monitor.until_marker("delete").await, id);
    // The job_info after it is one call more.
    assert_eq!(deleted.len(), 2, "{deleted:?}");

    for (what, sent) in [
        ("stats-job", stats_job),
        ("peek", peek),
        ("job entry", job_entry),
        ("kick-job", kick_job),
        ("delete", deleted[..1].to_vec()),
    ] {
        println!("{what}: {sent:?}");
        assert_eq!(
            sent.len(),
            1,
            "{what} sent {} commands naming the job: {sent:?}",
            sent.len()
        );
        // A Redis Function: this Redis has them (7.0 and later).
        assert!(sent[0].contains("\"FCALL\""), "{what} sent {sent:?}");
    }

    // A missing job is not found, in the same one call each.
    let gone = FAR_ID + 5;
    assert!(s.job_info(gone, now(&s)).await.expect("job_info").is_none());
    assert!(s.peek(gone).await.expect("peek").is_none());
    assert!(
        s.job_entry(gone, now(&s))
            .await
            .expect("job_entry")
            .is_none()
    );
    assert_eq!(s.kick_job(gone, now(&s)).await.expect("kick_job"), None);
    assert!(!delete(&s, C2, gone).await);
    let missing = sent_naming(&monitor.until_marker("missing").await, gone);
    assert_eq!(missing.len(), 5, "{missing:?}");

    // A job reserved by another connection is not deleted, nor kicked.
    let held = put(&s, "by-id", 7, 0, LONG, "held").await;
    let r = reserve(&s, C1, &["by-id"]).await.expect("the job reserved");
    assert_eq!(r.id, held);
    assert!(!delete(&s, C2, held).await);
    assert_eq!(s.kick_job(held, now(&s)).await.expect("kick_job"), None);
    assert_eq!(state(&s, held).await, JobState::Reserved);
    assert!(delete(&s, C1, held).await, "its holder deletes it");
}
