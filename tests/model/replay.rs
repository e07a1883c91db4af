//! The model kept honest against the code: paths of the model replayed step by step as
//! real `fencepost` processes, each write paused at the failpoint that matches the
//! model's step (`return(wait:...)`) and a crash being a SIGKILL there, with the folder
//! listing and `status --json` compared with the model's state after every step.
//!
//! The replayed model is the coarse one ([`WriteModel::coarse`]): the product has no
//! failpoint between a write's recovery, its decision and its pre-image link, nor between
//! the changes of a recovery. Power losses are not replayed (processes cannot lose the
//! page cache), so the counterexamples that need one (no folder fsync, the device number
//! in the identity, the any-subset power loss) are not here. The random paths are the
//! model of versions' ([`WriteModel::versions`]): each version a `write --seq`, a retry
//! the same command again, a version left running a process still paused at its
//! failpoint.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;

use super::*;
use crate::harness::Env;
use crate::support::{RES, command, mkfifo, sha256_hex, status_row, version};

/// The content of the version of inode `ino` (each of another size, so no two versions
/// look alike).
fn content(ino: u8) -> Vec<u8> {
    let (w, seq) = version_of(ino);
    version(&format!("worker {w} seq {seq}"), 600 + 150 * index(ino))
}

/// Where a write is paused once the model's step `step` is done.
fn point_after(step: Step) -> &'static str {
    match step {
        Step::LinkPre => "write.after_pre_link",
        Step::LinkNew => "write.after_new_link",
        Step::Rename => "write.after_rename",
        Step::Fsync => "write.after_dir_fsync",
        // Right after COMMIT (not `txn.after_commit`, which a refusal's audit event
        // also passes).
        Step::Commit => "write.before_cleanup",
        Step::Cleanup => unreachable!("the clean-up is the write's last step"),
    }
}

/// Every failpoint a replayed write may be paused at.
const WRITE_POINTS: [&str; 6] = [
    "write.before_lock",
    "write.after_pre_link",
    "write.after_new_link",
    "write.after_rename",
    "write.after_dir_fsync",
    "write.before_cleanup",
];

/// A `fencepost` process that pauses at each of its failpoints until told to go on.
struct Proc {
    child: Option<Child>,
    what: String,
    fifos: TempDir,
    /// The failpoint it is paused at.
    at: Option<&'static str>,
}

impl Proc {
    fn spawn(env: &Env, args: &[&str], now: i64, stdin: &[u8], points: &[&'static str]) -> Proc {
        let fifos = tempfile::Builder::new()
            .prefix("fencepost-replay-")
            .tempdir()
            .expect("fifo dir");
        let mut config = Vec::new();
        for point in points {
            let base = fifos.path().join(point);
            mkfifo(&PathBuf::from(format!("{}.resume", base.display())));
            config.push(format!("{point}=return(wait:{})", base.display()));
        }
        let mut child = command(env, args, Some(now))
            .env("FAILPOINTS", config.join(";"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn fencepost");
        let mut input = child.stdin.take().expect("stdin");
        input.write_all(stdin).expect("write stdin");
        drop(input);
        Proc {
            child: Some(child),
            what: format!("fencepost {}", args.join(" ")),
            fifos,
            at: None,
        }
    }

    fn file(&self, point: &str, end: &str) -> PathBuf {
        self.fifos.path().join(format!("{point}.{end}"))
    }

    /// Lets it go on from where it is paused, until it pauses at `to`.
    fn pause_at(&mut self, to: &'static str) {
        self.go_on();
        let ready = self.file(to, "ready");
        if self.wait_until(|_| ready.exists(), to) {
            let out = self.child.take().expect("running").wait_with_output();
            panic!("{} exited before {to}: {out:?}", self.what);
        }
        self.at = Some(to);
    }

    /// Lets it go on from where it is paused to its end.
    fn finish(mut self) -> Output {
        self.go_on();
        self.wait_until(|_| false, "its end");
        let child = self.child.take().expect("running");
        child.wait_with_output().expect("wait")
    }

    /// Polls until `done` or the process exits (then true); fails after 30 s.
    fn wait_until(&mut self, done: impl Fn(&Proc) -> bool, what: &str) -> bool {
        let started = Instant::now();
        loop {
            if done(self) {
                return false;
            }
            let child = self.child.as_mut().expect("running");
            if child.try_wait().expect("try_wait").is_some() {
                return true;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{} never reached {what}",
                self.what
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn kill(mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().expect("SIGKILL");
        let status = child.wait().expect("wait");
        assert_eq!(status.signal(), Some(9), "{}: {status}", self.what);
    }

    fn go_on(&mut self) {
        if let Some(point) = self.at.take() {
            let _ = std::fs::remove_file(self.file(point, "ready"));
            drop(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(self.file(point, "resume"))
                    .expect("open the resume fifo"),
            );
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One model path being replayed.
struct Replay<'m> {
    model: &'m WriteModel,
    env: Env,
    state: State,
    /// The write of each version under way, by the version's inode in the model.
    writers: BTreeMap<u8, Proc>,
    recoverer: Option<Proc>,
    /// Each version's staged files, by real inode number: the model's inode.
    inodes: BTreeMap<u64, u8>,
    /// The names of the temp files seen so far.
    temps: Vec<String>,
    done: Vec<Action>,
}

impl Replay<'_> {
    fn new(model: &WriteModel) -> Replay<'_> {
        assert!(model.coarse, "only the coarse model's steps are failpoints");
        Replay {
            model,
            env: Env::new(),
            state: model.init_states().remove(0),
            writers: BTreeMap::new(),
            recoverer: None,
            inodes: BTreeMap::new(),
            temps: Vec::new(),
            done: Vec::new(),
        }
    }

    /// The tick of every command: the current lease's deadline.
    fn now(&self) -> i64 {
        10 * self.state.lease.map_or(0, |row| i64::from(row.epoch))
    }

    /// Takes `action` in the model and with the processes, then compares.
    fn step(&mut self, action: Action) {
        let mut enabled = Vec::new();
        self.model.actions(&self.state, &mut enabled);
        assert!(
            enabled.contains(&action),
            "{action:?} cannot be taken after {:?}",
            self.done
        );
        let next = self
            .model
            .next_state(&self.state, action)
            .expect("an enabled action has a next state");
        self.done.push(action);
        match action {
            Action::Claim(w) => self.claim(w, &next),
            Action::Stage(w, seq) | Action::Retry(w, seq) => self.stage(w, seq, &next),
            Action::Begin(w, seq) | Action::Step(w, seq) => self.advance(w, seq, &next),
            Action::Crash(w, seq) => {
                if let Some(proc) = self.writers.remove(&ino(w, seq)) {
                    proc.kill();
                }
            }
            Action::RecoverBegin => self.recover(&next),
            Action::RecoverCommit => {
                let out = self.recoverer.take().expect("recover paused").finish();
                assert_eq!(out.status.code(), Some(0), "recover: {out:?}");
            }
            Action::RecoverCrash => self.recoverer.take().expect("recover paused").kill(),
            Action::RecoverStep | Action::PowerLoss(_) => {
                panic!("{action:?} has no real counterpart")
            }
        }
        self.state = next;
        self.compare();
    }

    fn claim(&mut self, w: u8, next: &State) {
        let epoch = next.workers[usize::from(w)].epoch;
        let got = self
            .env
            .claim(RES, &format!("worker-{w}"), 10, 10 * (i64::from(epoch) - 1));
        assert_eq!(got, i64::from(epoch), "claim after {:?}", self.done);
    }

    fn write_args(&self, w: u8, seq: u8) -> Vec<String> {
        let epoch = self.state.workers[usize::from(w)].epoch.to_string();
        let mut args = vec!["write".into(), RES.into(), "--epoch".into(), epoch];
        args.extend(["--seq".into(), seq.to_string()]);
        if !self.model.protocol.fenced {
            args.push("--unfenced".into());
        }
        args
    }

    fn stage(&mut self, w: u8, seq: u8, next: &State) {
        let args = self.write_args(w, seq);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let file = ino(w, seq);
        let mut proc = Proc::spawn(&self.env, &args, self.now(), &content(file), &WRITE_POINTS);
        if let Phase::Refused(_) = next.workers[usize::from(w)].write(seq) {
            self.expect_end(w, seq, proc.finish(), next);
            return;
        }
        proc.pause_at("write.before_lock");
        // Found by its name, which is new; its inode number may be one a gone file had.
        let staged: Vec<(String, u64)> = std::fs::read_dir(self.env.root())
            .expect("list the root")
            .map(|entry| entry.expect("entry"))
            .map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                (name, entry.metadata().expect("stat").ino())
            })
            .filter(|(name, _)| name.contains("fencepost-tmp-") && !self.temps.contains(name))
            .collect();
        assert_eq!(
            staged.len(),
            1,
            "one new temp file for worker {w} seq {seq}"
        );
        let (name, real) = staged[0].clone();
        self.temps.push(name);
        self.inodes.insert(real, file);
        self.writers.insert(file, proc);
    }

    /// Lets the write of version `seq` of worker `w` go on to where the model's next
    /// state has it.
    fn advance(&mut self, w: u8, seq: u8, next: &State) {
        let file = ino(w, seq);
        match *next.workers[usize::from(w)].write(seq) {
            Phase::Writing(i) => {
                let point = point_after(self.model.steps[usize::from(i) - 1]);
                let proc = self.writers.get_mut(&file).expect("paused");
                proc.pause_at(point);
            }
            _ => {
                let out = self.writers.remove(&file).expect("paused").finish();
                self.expect_end(w, seq, out, next);
            }
        }
    }

    /// A write that ended: its exit code and outcome are the model's.
    fn expect_end(&self, w: u8, seq: u8, out: Output, next: &State) {
        let (code, word) = match *next.workers[usize::from(w)].write(seq) {
            Phase::Done(word) => (0, word),
            Phase::Refused("stale") => (5, "stale"),
            Phase::Refused("unissued") => (8, "unissued"),
            Phase::Failed => (1, ""),
            ref other => panic!("worker {w} seq {seq} cannot end in {other:?}"),
        };
        assert_eq!(
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).trim()
            ),
            (Some(code), word),
            "worker {w}'s write of seq {seq} after {:?}: {out:?}",
            self.done
        );
    }

    fn recover(&mut self, next: &State) {
        let mut proc = Proc::spawn(
            &self.env,
            &["recover"],
            self.now(),
            b"",
            &["txn.before_commit"],
        );
        if next.recoverer == Recoverer::Recovered {
            proc.pause_at("txn.before_commit");
            self.recoverer = Some(proc);
        } else {
            let out = proc.finish();
            assert_eq!(out.status.code(), Some(1), "recover: {out:?}");
        }
    }

    /// The folder as the model names it: each name's version, from inode numbers.
    fn listing(&self) -> BTreeMap<Name, u8> {
        let prefix = format!(".{RES}.fencepost-");
        let worker = |ino: u64| {
            *self
                .inodes
                .get(&ino)
                .unwrap_or_else(|| panic!("inode {ino} is no version's staged file"))
        };
        let mut names = BTreeMap::new();
        for entry in std::fs::read_dir(self.env.root()).expect("list the root") {
            let entry = entry.expect("entry");
            let file = entry.file_name().to_string_lossy().into_owned();
            let ino = entry.metadata().expect("stat").ino();
            let token = |t: &str| worker(t.parse().expect("a link's token is an inode"));
            let name = match file.strip_prefix(&prefix) {
                _ if file == ".fencepost" => continue,
                None if file == RES => Name::Doc,
                Some(rest) if rest.starts_with("tmp-") => Name::Tmp(worker(ino)),
                Some(rest) if rest.starts_with("pre-") => Name::Pre(token(&rest[4..])),
                Some(rest) if rest.starts_with("new-") => Name::New(token(&rest[4..])),
                // The staged hash: not in the model (it only matters for hand edits).
                Some(rest) if rest.starts_with("sum-") => continue,
                _ => panic!("a file the model does not know: {file}"),
            };
            names.insert(name, worker(ino));
        }
        names
    }

    /// The folder and `status --json` against the model's state.
    fn compare(&self) {
        let s = &self.state;
        let model: BTreeMap<Name, u8> = s.folder.cached.iter().collect();
        assert_eq!(self.listing(), model, "the folder after {:?}", self.done);
        if s.lease.is_none() {
            return;
        }
        let row = status_row(&self.env, RES, Some(self.now()));
        let hash = |ino: u8| json!(sha256_hex(&content(ino)));
        let content_epoch = s.sink.and_then(|r| r.content).map(|c| c.epoch);
        let want = json!({
            "lease": s.lease.map(|r| r.epoch),
            "fence": s.sink.map(|r| r.fence),
            "content_epoch": content_epoch,
            "seq": s.sink.and_then(|r| r.content).map(|c| c.seq),
            "sha256": s.sink.and_then(|r| r.content).map(|c| hash(c.file)),
            "document": s.folder.get(Name::Doc).map(hash),
        });
        let field = |v: &Value| if v.is_null() { Value::Null } else { v.clone() };
        let got = json!({
            "lease": field(&row["lease"]["epoch"]),
            "fence": field(&row["sink"]["fence"]),
            "content_epoch": field(&row["sink"]["content_epoch"]),
            "seq": field(&row["sink"]["seq"]),
            "sha256": field(&row["sink"]["sha256"]),
            "document": field(&row["document"]["sha256"]),
        });
        assert_eq!(got, want, "status after {:?}: {row}", self.done);
    }
}

/// Replays `actions` on `model`, comparing after every step; returns the last state.
fn replay(model: &WriteModel, actions: &[Action]) -> State {
    let mut replay = Replay::new(model);
    for &action in actions {
        replay.step(action);
    }
    replay.state.clone()
}

/// The model without power losses, as coarse as the failpoints.
fn replayable(protocol: Protocol) -> WriteModel {
    WriteModel::new(3, protocol, PowerLoss::Prefix)
        .power_losses(0)
        .coarse()
}

#[test]
fn unfenced_counterexample_replays_as_a_lower_epoch_over_an_acknowledged_one() {
    let model = replayable(Protocol {
        fenced: false,
        ..Protocol::CURRENT
    });
    let path = counterexample(model.clone(), LOWER_EPOCH);
    let last = replay(&model, &path.into_actions());
    assert!(!no_lower_epoch(&model, &last), "the real run broke it too");
}

#[test]
fn shared_link_names_counterexample_keeps_the_write_with_per_writer_links() {
    // The old protocol loses an acknowledged write on this path (the old binary does;
    // `acknowledged.rs` has it by hand). The same steps with the current binary must end
    // as the current protocol's model says, with every property kept.
    let old = replayable(Protocol {
        own_links: false,
        ..Protocol::CURRENT
    });
    let actions = counterexample(old, ACKED_LOST).into_actions();
    let model = replayable(Protocol::CURRENT);
    let last = replay(&model, &actions);
    assert!(no_acked_write_lost(&model, &last), "{last:?}");
    assert!(no_lower_epoch(&model, &last), "{last:?}");
}

/// Random model paths: how many, how long at most, and the seed.
const PATHS: usize = 12;
const PATH_STEPS: usize = 30;
const SEED: u64 = 1;

/// A random action, weighted so that writes get somewhere: a step of a write is likelier
/// than a claim, and a crash or a `recover` less likely still.
fn pick(rng: &mut fastrand::Rng, actions: &[Action]) -> Action {
    let weight = |action: &Action| match action {
        Action::Stage(..) | Action::Begin(..) | Action::Step(..) | Action::RecoverCommit => 8,
        Action::Claim(_) | Action::Retry(..) => 4,
        _ => 1,
    };
    let mut left = rng.usize(..actions.iter().map(weight).sum::<usize>());
    for action in actions {
        match left.checked_sub(weight(action)) {
            Some(rest) => left = rest,
            None => return *action,
        }
    }
    unreachable!("the draw is below the total weight")
}

#[test]
fn seqs_compared_for_equality_counterexample_refuses_the_older_seq_for_real() {
    // With seqs compared for equality only, seq 1 replaces seq 2 on this path. The same
    // steps with the current binary, up to seq 1's decision, must refuse seq 1 as stale
    // (exit 5), as the current protocol's model says: its later steps are not taken.
    let broken = replayable(Protocol {
        seq_order: false,
        ..Protocol::CURRENT
    })
    .versions();
    let actions = counterexample(broken, WENT_BACK).into_actions();
    let model = replayable(Protocol::CURRENT).versions();
    let mut replay = Replay::new(&model);
    for action in actions {
        let mut enabled = Vec::new();
        model.actions(&replay.state, &mut enabled);
        if !enabled.contains(&action) {
            break;
        }
        replay.step(action);
    }
    let last = &replay.state;
    assert_eq!(
        *last.workers[1].write(1),
        Phase::Refused("stale"),
        "{last:?}"
    );
    assert!(never_goes_back(&model, last), "{last:?}");
    assert!(no_acked_write_lost(&model, last), "{last:?}");
}

#[test]
fn random_model_paths_replay_as_real_processes() {
    let model = replayable(Protocol::CURRENT).versions();
    let mut rng = fastrand::Rng::with_seed(SEED);
    let (mut steps, mut interrupted, mut acked, mut stale) = (0, 0, 0, 0);
    let (mut retries, mut replays, mut seq_stale) = (0, 0, 0);
    for _ in 0..PATHS {
        let mut replay = Replay::new(&model);
        for _ in 0..PATH_STEPS {
            let mut actions = Vec::new();
            model.actions(&replay.state, &mut actions);
            // `recover` before the first claim finds no state file and does nothing.
            actions.retain(|a| *a != Action::RecoverBegin || replay.state.lease.is_some());
            if actions.is_empty() {
                break;
            }
            let action = pick(&mut rng, &actions);
            replay.step(action);
            steps += 1;
            retries += usize::from(matches!(action, Action::Retry(..)));
            interrupted += usize::from(interrupted_rename(&model, &replay.state));
            seq_stale += usize::from(older_seq_refused(&model, &replay.state));
        }
        let ended = |ended: fn(&Phase) -> bool| {
            writes(&replay.state)
                .filter(|(_, _, phase)| ended(phase))
                .count()
        };
        acked += ended(Phase::acked);
        stale += ended(|phase| *phase == Phase::Refused("stale"));
        replays += ended(|phase| *phase == Phase::Done("replay"));
    }
    println!(
        "replayed {PATHS} random model paths as real processes: {steps} steps, \
         {interrupted} states with a dead writer's uncommitted rename, \
         {acked} writes acknowledged ({replays} as replays), {stale} refused as stale \
         ({seq_stale} states with an older seq refused after a newer one), {retries} retries"
    );
}
