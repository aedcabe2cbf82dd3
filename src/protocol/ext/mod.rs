//! The values of redstalk's protocol extensions (docs/EXTENSIONS.md): keyed puts and the
//! commands that act on a job by its key, batches, durations in milliseconds, and
//! flushing a tube. The grammar is in [`parse`]; the replies are [`crate::protocol::Reply`]
//! variants.
//!
//! Invariants: every value here is within the bounds the document states (a [`Key`] is
//! 1–128 name bytes, a [`Millis`] at most `u32::MAX` seconds, a batch 1–1000 ids), so
//! nothing past the parser re-checks them; and no line beanstalkd accepts is ever read as
//! an extension (an extension is only what the reference answers `UNKNOWN_COMMAND` or
//! `BAD_FORMAT` to).

pub mod parse;

use std::borrow::Borrow;
use std::fmt;

use bytes::Bytes;

use super::command::{Counter, Request, TubeName};

/// Which command-line grammar a listener speaks (`--extensions on|off`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grammar {
    /// beanstalkd's own, quirks included: an extension line gets exactly what the
    /// reference answers (`UNKNOWN_COMMAND`, or `BAD_FORMAT` where a prefix matches).
    Standard,
    /// beanstalkd's, plus `list-extensions` and the extensions of these families. A line
    /// the standard grammar accepts means the same in both; a line of a family not
    /// listed gets the standard grammar's answer, so a family the engine does not serve
    /// yet is invisible.
    Extended(Families),
}

impl Grammar {
    /// Every extension: the whole grammar of docs/EXTENSIONS.md.
    pub const FULL: Grammar = Grammar::Extended(Families::ALL);

    /// Whether lines of `family` are read as extensions.
    pub fn serves(self, family: Family) -> bool {
        match self {
            Grammar::Standard => false,
            Grammar::Extended(families) => families.contains(family),
        }
    }
}

/// A family of extensions, as `list-extensions` names it: what a client probes for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Keys,
    Batches,
    Milliseconds,
    Flush,
}

impl Family {
    /// In the order `list-extensions` lists them.
    pub const ALL: [Family; 4] = [
        Family::Keys,
        Family::Batches,
        Family::Milliseconds,
        Family::Flush,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Family::Keys => "keys",
            Family::Batches => "batches",
            Family::Milliseconds => "milliseconds",
            Family::Flush => "flush",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of [`Family`]s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Families(u8);

impl Families {
    pub const NONE: Families = Families(0);
    pub const ALL: Families = Families(0b1111);

    pub const fn of(family: Family) -> Families {
        Families(1 << family as u8)
    }

    pub const fn with(self, family: Family) -> Families {
        Families(self.0 | 1 << family as u8)
    }

    pub fn contains(self, family: Family) -> bool {
        self.0 & family.bit() != 0
    }

    /// Whether every family of `other` is in this set.
    pub fn covers(self, other: Families) -> bool {
        self.0 & other.0 == other.0
    }

    /// The families in this set, in [`Family::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = Family> {
        Family::ALL.into_iter().filter(move |&f| self.contains(f))
    }
}

/// Longest key (bytes): with the longest numbers a keyed put still fits the 224-byte
/// line (docs/EXTENSIONS.md, "Keys").
pub const MAX_KEY_LEN: usize = 128;

/// Most jobs one `reserve-batch` takes, and most ids one list command names (tuber's
/// bounds).
pub const MAX_BATCH: usize = 1000;

/// Longest line of a list command (`delete-batch`, `release-batch`, `touch-batch`,
/// `bury-batch`), CRLF included: its longest verb and parameters, then [`MAX_BATCH`]
/// ids of up to 20 digits, each after a space. Every other line keeps the reference's
/// 224 bytes.
pub const LIST_LINE_MAX: usize =
    "release-batch ".len() + 10 + 1 + MAX_DURATION_WIDTH + MAX_BATCH * 21 + 2;

/// Widest duration in canonical form: `4294967295000ms`.
const MAX_DURATION_WIDTH: usize = 15;

/// A key: unique per tube among its jobs. Spelled as a tube name (`A-Za-z0-9-+/;.$_()`,
/// not starting with `-`, so it has no `:` and a tag splits unambiguously), and at most
/// [`MAX_KEY_LEN`] bytes. Cloning is cheap.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(TubeName);

impl Key {
    /// Validate `key`; `None` when it is not a key.
    pub fn new(key: &[u8]) -> Option<Key> {
        if key.len() > MAX_KEY_LEN {
            return None;
        }
        TubeName::new(key).map(Key)
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// A duration as an extension writes it: whole seconds (`30`, as beanstalkd) or
/// milliseconds (`1500ms`). At most `u32::MAX` seconds, the reference's own bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Millis(u64);

impl Millis {
    /// The longest duration: `u32::MAX` seconds.
    pub const MAX: Millis = Millis(u32::MAX as u64 * 1000);

    pub const ZERO: Millis = Millis(0);

    pub fn from_secs(secs: u32) -> Millis {
        Millis(u64::from(secs) * 1000)
    }

    /// `ms` milliseconds, if within [`Millis::MAX`].
    pub fn new(ms: u64) -> Option<Millis> {
        (ms <= Millis::MAX.0).then_some(Millis(ms))
    }

    pub fn as_millis(self) -> u64 {
        self.0
    }

    pub fn as_nanos(self) -> u64 {
        self.0 * 1_000_000
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }
}

/// What a put with a key does when a job with that key exists in the tube.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyMode {
    /// `idp:` (tuber's tag): answer the existing job's id and state, change nothing.
    Dedupe,
    /// `rpl:`: replace the existing job's body, priority, delay and TTR in place (same
    /// id) while it is ready or delayed; otherwise change nothing and answer CONFLICT.
    Replace,
}

/// A put's key tag: `idp:<key>[:<window>]` or `rpl:<key>[:<window>]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PutKey {
    pub key: Key,
    pub mode: KeyMode,
    /// How long the key outlives its job once the job is deleted (the dedupe window):
    /// a put with the key within it answers the deleted job's id. Zero: none.
    pub window: Millis,
}

/// A `put` in the extended grammar: durations that may be in milliseconds, and an
/// optional key. Its body excludes the trailing CRLF.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtendedPut {
    pub pri: u32,
    pub delay: Millis,
    pub ttr: Millis,
    pub key: Option<PutKey>,
    pub body: Bytes,
}

/// The states a flush empties. Never empty: no state named means all four.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlushStates {
    pub ready: bool,
    pub delayed: bool,
    pub buried: bool,
    pub reserved: bool,
}

impl FlushStates {
    pub const ALL: FlushStates = FlushStates {
        ready: true,
        delayed: true,
        buried: true,
        reserved: true,
    };

    pub const BURIED: FlushStates = FlushStates {
        ready: false,
        delayed: false,
        buried: true,
        reserved: false,
    };
}

/// What a list command does to each of its ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchOp {
    /// `delete-batch <id>...` (tuber's).
    Delete,
    /// `release-batch <pri> <delay> <id>...`: every job with that priority and delay.
    Release { pri: u32, delay: Millis },
    /// `touch-batch <id>...`.
    Touch,
    /// `bury-batch <pri> <id>...`.
    Bury { pri: u32 },
}

/// A list command's kind, as its reply names it (`DELETED_BATCH` ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchKind {
    Delete,
    Release,
    Touch,
    Bury,
}

impl BatchOp {
    pub fn kind(self) -> BatchKind {
        match self {
            BatchOp::Delete => BatchKind::Delete,
            BatchOp::Release { .. } => BatchKind::Release,
            BatchOp::Touch => BatchKind::Touch,
            BatchOp::Bury { .. } => BatchKind::Bury,
        }
    }
}

/// The state of the job a key names, as extension replies spell it (tuber's words).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyState {
    Ready,
    Reserved,
    Delayed,
    Buried,
    /// The job was deleted and its key is within its dedupe window.
    Deleted,
}

impl KeyState {
    pub fn word(self) -> &'static str {
        match self {
            KeyState::Ready => "READY",
            KeyState::Reserved => "RESERVED",
            KeyState::Delayed => "DELAYED",
            KeyState::Buried => "BURIED",
            KeyState::Deleted => "DELETED",
        }
    }
}

/// The extension verbs, as `/metrics` counts them (`redstalk_commands_total{command=...}`),
/// each with the family that brings it (`None`: `list-extensions`, which every
/// extended grammar speaks). A standard verb written with extended arguments is not
/// here: it counts as that verb (`cmd-put`, ...), rule 3 of docs/EXTENSIONS.md.
pub const EXTENSION_VERBS: [(&str, Option<Family>); 13] = [
    ("reserve-batch", Some(Family::Batches)),
    ("delete-batch", Some(Family::Batches)),
    ("release-batch", Some(Family::Batches)),
    ("touch-batch", Some(Family::Batches)),
    ("bury-batch", Some(Family::Batches)),
    ("find-key", Some(Family::Keys)),
    ("peek-key", Some(Family::Keys)),
    ("delete-key", Some(Family::Keys)),
    ("kick-key", Some(Family::Keys)),
    ("bury-key", Some(Family::Keys)),
    ("retime-key", Some(Family::Keys)),
    ("flush-tube", Some(Family::Flush)),
    ("list-extensions", None),
];

/// A complete, well-formed extension request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Extension {
    /// A `put` with a key or a duration in milliseconds.
    Put(ExtendedPut),
    /// `release <id> <pri> <delay>` with the delay in milliseconds.
    Release { id: u64, pri: u32, delay: Millis },
    /// `pause-tube <tube> <delay>` with the delay in milliseconds.
    PauseTube { tube: TubeName, delay: Millis },
    /// `reserve-batch <n> [<timeout>]`: up to `max` jobs (1–[`MAX_BATCH`]); waits up
    /// to `timeout` for the first (zero: answers at once).
    ReserveBatch { max: u16, timeout: Millis },
    /// A list command over 1–[`MAX_BATCH`] ids, in the order given (repeats allowed).
    Batch { op: BatchOp, ids: Vec<u64> },
    /// `find-key <key>` (in the used tube): the job's id and state.
    FindKey(Key),
    /// `peek-key <key>`: as `peek` of the key's job.
    PeekKey(Key),
    /// `delete-key <key>`: as `delete` of the key's job.
    DeleteKey(Key),
    /// `kick-key <key>`: as `kick-job` of the key's job.
    KickKey(Key),
    /// `bury-key <key> <pri>`: bury the key's job while ready, delayed, or reserved by
    /// this connection.
    BuryKey { key: Key, pri: u32 },
    /// `retime-key <key> <delay>`: the key's job (ready or delayed) becomes due after
    /// `delay` from now (ready at once for zero), same id.
    RetimeKey { key: Key, delay: Millis },
    /// `flush-tube <tube> [<state>...]`, `flush-buried <tube>`: delete the tube's jobs
    /// in those states, in bounded steps.
    Flush { tube: TubeName, states: FlushStates },
    /// `list-extensions`: which extensions this server speaks.
    ListExtensions,
}

impl Extension {
    /// The `cmd-*` counter an extension bumps: only a standard verb written with
    /// extended arguments (a keyed put counts as a put). Extension verbs count in
    /// `/metrics` only, so no `stats` figure changes for a client that never sends one.
    pub fn counter(&self) -> Option<Counter> {
        match self {
            Extension::Put(_) => Some(Counter::Put),
            Extension::Release { .. } => Some(Counter::Release),
            Extension::PauseTube { .. } => Some(Counter::PauseTube),
            _ => None,
        }
    }

    /// Its place in [`EXTENSION_VERBS`]: an extension verb's, counted in `/metrics`
    /// only. `None` for a standard verb with extended arguments ([`Extension::counter`]).
    pub fn verb_index(&self) -> Option<usize> {
        if self.counter().is_some() {
            return None;
        }
        let name = self.name();
        EXTENSION_VERBS.iter().position(|(verb, _)| *verb == name)
    }

    /// The command's name, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Extension::Put(_) => "put",
            Extension::Release { .. } => "release",
            Extension::PauseTube { .. } => "pause-tube",
            Extension::ReserveBatch { .. } => "reserve-batch",
            Extension::Batch { op, .. } => match op.kind() {
                BatchKind::Delete => "delete-batch",
                BatchKind::Release => "release-batch",
                BatchKind::Touch => "touch-batch",
                BatchKind::Bury => "bury-batch",
            },
            Extension::FindKey(_) => "find-key",
            Extension::PeekKey(_) => "peek-key",
            Extension::DeleteKey(_) => "delete-key",
            Extension::KickKey(_) => "kick-key",
            Extension::BuryKey { .. } => "bury-key",
            Extension::RetimeKey { .. } => "retime-key",
            Extension::Flush { .. } => "flush-tube",
            Extension::ListExtensions => "list-extensions",
        }
    }
}

/// What the extended codec yields: a beanstalkd request (everything the standard grammar
/// reads, and every rejection), or an extension, boxed: a frame is moved from the codec
/// to the session, and an unboxed extension (a keyed put's header and body) made every
/// frame 88 bytes where a request is 56, which cost beanstalkd's own commands about 3 %
/// of their instructions (bench/results/2026-12-03-issue29-attribution.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Standard(Request),
    Extension(Box<Extension>),
}

impl Frame {
    pub fn extension(ext: Extension) -> Frame {
        Frame::Extension(Box::new(ext))
    }

    /// The extension this frame carries, if it is one.
    pub fn as_extension(&self) -> Option<&Extension> {
        match self {
            Frame::Extension(ext) => Some(ext),
            Frame::Standard(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Beanstalkd's own commands do not carry the extensions' size through the parse
    /// (see [`Frame`]).
    #[test]
    fn a_frame_and_a_line_are_no_larger_than_a_request() {
        use std::mem::size_of;
        let request = size_of::<Request>();
        assert!(
            size_of::<Frame>() <= request,
            "{} > {request}",
            size_of::<Frame>()
        );
        let line = size_of::<crate::protocol::parse::Line>();
        assert!(line <= request, "{line} > {request}");
    }

    #[test]
    fn keys_are_name_bytes_within_the_bound() {
        assert!(Key::new(b"order-1234").is_some());
        assert!(Key::new(b"a(b)$c;d/e+f.g_h").is_some());
        assert!(Key::new("k".repeat(MAX_KEY_LEN).as_bytes()).is_some());
        for bad in [
            &b""[..],
            b"-x",
            b"a:b",
            b"a b",
            b"caf\xc3\xa9",
            "k".repeat(MAX_KEY_LEN + 1).as_bytes(),
        ] {
            assert_eq!(Key::new(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn millis_bounds_and_units() {
        assert_eq!(Millis::from_secs(2).as_millis(), 2000);
        assert_eq!(Millis::from_secs(u32::MAX), Millis::MAX);
        assert_eq!(Millis::new(Millis::MAX.as_millis() + 1), None);
        assert_eq!(Millis::new(1500).map(Millis::as_nanos), Some(1_500_000_000));
    }

    #[test]
    fn every_extension_verb_has_its_metrics_slot() {
        let key = || Key::new(b"k").unwrap();
        let tube = TubeName::new(b"t").unwrap();
        let verbs = [
            Extension::ReserveBatch {
                max: 1,
                timeout: Millis::ZERO,
            },
            Extension::Batch {
                op: BatchOp::Delete,
                ids: vec![1],
            },
            Extension::Batch {
                op: BatchOp::Release {
                    pri: 0,
                    delay: Millis::ZERO,
                },
                ids: vec![1],
            },
            Extension::Batch {
                op: BatchOp::Touch,
                ids: vec![1],
            },
            Extension::Batch {
                op: BatchOp::Bury { pri: 0 },
                ids: vec![1],
            },
            Extension::FindKey(key()),
            Extension::PeekKey(key()),
            Extension::DeleteKey(key()),
            Extension::KickKey(key()),
            Extension::BuryKey { key: key(), pri: 0 },
            Extension::RetimeKey {
                key: key(),
                delay: Millis::ZERO,
            },
            Extension::Flush {
                tube: tube.clone(),
                states: FlushStates::ALL,
            },
            Extension::ListExtensions,
        ];
        let slots: Vec<_> = verbs.iter().map(Extension::verb_index).collect();
        assert_eq!(
            slots,
            (0..EXTENSION_VERBS.len()).map(Some).collect::<Vec<_>>()
        );
        let release = Extension::Release {
            id: 1,
            pri: 0,
            delay: Millis::ZERO,
        };
        assert_eq!(
            release.verb_index(),
            None,
            "a release counts as cmd-release"
        );
        let pause = Extension::PauseTube {
            tube,
            delay: Millis::ZERO,
        };
        assert_eq!(
            pause.verb_index(),
            None,
            "a pause-tube counts as cmd-pause-tube"
        );
    }

    #[test]
    fn families_are_a_set_in_list_order() {
        let set = Families::NONE.with(Family::Flush).with(Family::Keys);
        assert!(set.contains(Family::Keys) && !set.contains(Family::Batches));
        assert!(set.covers(Families::of(Family::Flush)) && set.covers(Families::NONE));
        assert!(!set.covers(Families::ALL));
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            [Family::Keys, Family::Flush]
        );
        assert_eq!(Families::ALL.iter().collect::<Vec<_>>(), Family::ALL);
        assert!(!Grammar::Standard.serves(Family::Keys));
        assert!(Grammar::FULL.serves(Family::Keys));
    }

    #[test]
    fn the_list_line_bound_holds_the_longest_canonical_list() {
        let ids = format!(" {}", u64::MAX).repeat(MAX_BATCH);
        let line = format!("release-batch {} 4294967295000ms{ids}\r\n", u32::MAX);
        assert_eq!(line.len(), LIST_LINE_MAX);
    }
}
