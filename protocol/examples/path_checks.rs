//! What a submission's path checks cost, by whom they are for: the operator's run as the daemon,
//! another user's on a thread that takes their rights (`command::as_submitter`). As root:
//!
//! ```text
//! cargo run --release -p gangway-protocol --example path_checks
//! ```
//!
//! Each submission's checks here are those of a torch job's: `python3` found on a `PATH` (through
//! Debian's `python3 -> python3.11` link) and checked, and its directory reached.

use std::path::Path;
use std::time::Instant;

use gangway_protocol::command::{Submitter, check_program, reachable_by};
use gangway_protocol::worker::RunCommand;

fn main() {
    let run = RunCommand {
        args: vec!["train.py".into()],
        cwd: "/tmp".into(),
        env: [("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned())].into(),
        log: None,
        user: None,
    };
    let checks = |who: &Submitter| {
        check_program("run.args", Path::new("python3"), &run, who).expect("python3 is checked");
        reachable_by(Path::new("/tmp/."), who).expect("/tmp is reachable");
    };
    const SUBMISSIONS: u32 = 2_000;
    let operator = Submitter::this_process();
    let another = Submitter {
        uid: 65534,
        gid: 65534,
    };
    for round in 1..=3 {
        for (name, who) in [("the operator", &operator), ("uid 65534", &another)] {
            let began = Instant::now();
            for _ in 0..SUBMISSIONS {
                checks(who);
            }
            let each = began.elapsed().as_secs_f64() * 1e6 / f64::from(SUBMISSIONS);
            println!("round {round}, {name}: {each:.0} us a submission");
        }
    }
}
