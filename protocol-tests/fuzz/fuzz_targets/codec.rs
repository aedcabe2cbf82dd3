//! Fuzz target: arbitrary client bytes through the codec and the command parser
//! (`redstalk::protocol`). On every input it proves, via the codec's own invariant
//! checks (`protocol::codec::harness`, shared with the property tests): no panic, the
//! same requests whether the bytes arrive whole, in the chunk sizes the first byte
//! picks, or one at a time; the decoder's buffer never holds more than its state needs
//! (a line window, a body); every rejection answers one of the reference's error lines.
//! It does so for both grammars: beanstalkd's, and the one with redstalk's extensions
//! (docs/EXTENSIONS.md), whose values must also be within the document's bounds.

#![no_main]

use libfuzzer_sys::fuzz_target;
use redstalk::protocol::Grammar;
use redstalk::protocol::codec::harness;

/// A small `-z`, so that too-big puts are reachable by short inputs.
const MAX_JOB_SIZE: u32 = 100;

fuzz_target!(|data: &[u8]| {
    let Some((&k, input)) = data.split_first() else {
        return;
    };
    let chunks = [usize::from(k % 64) + 1, usize::from(k / 64) + 1];
    harness::check_stream(input, &chunks, MAX_JOB_SIZE);
    harness::check_stream_in(input, &chunks, MAX_JOB_SIZE, Grammar::FULL);
});
