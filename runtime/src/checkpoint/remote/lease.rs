//! One job per object store prefix: a lease on `--checkpoint-dir s3://…`.
//!
//! A local checkpoint directory is kept to one job by its lock file; a
//! prefix in an object store has no such lock, and two jobs writing one
//! prefix would delete each other's checkpoints (each start sweeps what its
//! own checkpoints do not list). So a job that starts on a prefix holds the
//! object `_owner` there (this host, this process, a beat counter) and
//! renews it every [`BEAT`]:
//!
//! * no `_owner`, or one a dead process of this machine left: taken at
//!   once ("this machine": same host name, boot and pid namespace; a live
//!   process is the one with the holder's pid *and* start time);
//! * one a live process of this machine holds: refused at once;
//! * any other (another host, another container on this one): watched for
//!   [`EXPIRY`]; renewed meanwhile, the prefix is in use and the start is
//!   refused; unchanged, its holder is gone (SIGKILLed, its machine lost)
//!   and it is taken.
//!
//! No clocks are compared, only whether the beat moved. Two starts in the
//! same instant both write; each reads back after a pause and the one whose
//! write was overwritten is refused. Every checkpoint checks that the lease
//! is still this job's before its `_metadata` goes out, so a job that lost
//! it (paused past [`EXPIRY`] while another took over) fails instead of
//! writing over its successor. A normal end deletes `_owner`.
//!
//! Consumer group shards take no lease: the group's generation fences them
//! (see `crate::group`). Like Flink's, the lease is no substitute for
//! giving each job its own prefix.

use super::names::OWNER;
use super::{io, Remote};
use crate::error::{Result, RuntimeError};
use object_store::{ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the holder renews the lease.
pub const BEAT: Duration = Duration::from_secs(2);
/// How long another host's lease must stay unchanged to count as gone.
pub const EXPIRY: Duration = Duration::from_secs(7);
/// How long a start waits after writing the lease before it reads it back.
const SETTLE: Duration = Duration::from_millis(500);

/// Who holds a prefix: the content of `_owner`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Owner {
    host: String,
    pid: u32,
    /// Nanoseconds of the holder's start: tells two runs with one pid apart.
    run: u128,
    beat: u64,
    /// The boot and the pid namespace the pid belongs to, and the
    /// process's start time in clock ticks since boot: together they say
    /// whether a process of this machine is the holder (containers on one
    /// host share a host name, not their pids).
    #[serde(default)]
    boot: String,
    #[serde(default)]
    pid_ns: String,
    #[serde(default)]
    started: u64,
}

/// The start time of process `pid` in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`), if it runs in this pid namespace.
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count after its ')'.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

impl Owner {
    fn me() -> Self {
        let read = |path: &str| std::fs::read_to_string(path).map(|t| t.trim().to_owned());
        let run = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let pid = std::process::id();
        Self {
            host: read("/proc/sys/kernel/hostname").unwrap_or_else(|_| "unknown-host".into()),
            pid,
            run,
            beat: 0,
            boot: read("/proc/sys/kernel/random/boot_id").unwrap_or_default(),
            pid_ns: std::fs::read_link("/proc/self/ns/pid")
                .map(|l| l.display().to_string())
                .unwrap_or_default(),
            started: start_ticks(pid).unwrap_or(0),
        }
    }

    /// Whether `self` names a process of this machine's boot and pid
    /// namespace (`me`'s), whose liveness can then be looked up.
    fn local_to(&self, me: &Owner) -> bool {
        !me.boot.is_empty()
            && !me.pid_ns.is_empty()
            && (&self.host, &self.boot, &self.pid_ns) == (&me.host, &me.boot, &me.pid_ns)
    }

    /// For a holder [`Owner::local_to`] this process: whether it still runs.
    fn alive(&self) -> bool {
        start_ticks(self.pid).is_some_and(|t| t == self.started)
    }

    fn same_run(&self, other: &Owner) -> bool {
        (&self.host, self.pid, self.run) == (&other.host, other.pid, other.run)
    }

    fn describe(&self) -> String {
        format!("strata on host {} (pid {})", self.host, self.pid)
    }
}

/// This process's lease on a prefix, renewed until it is dropped.
pub struct Lease {
    /// The checkpoints' connection (retried for
    /// `checkpoint.storage.retry-for`): taking and verifying the lease.
    remote: Arc<Remote>,
    /// One retried for a [`BEAT`] only: renewing, and releasing at the end
    /// (a job that fails because the store is away must not wait for it).
    quick: Arc<Remote>,
    me: Owner,
    stop: Arc<AtomicBool>,
    renewer: Option<std::thread::JoinHandle<()>>,
}

fn read(remote: &Remote) -> Result<Option<Owner>> {
    Ok(remote
        .read_owner()?
        .map(|body| serde_json::from_slice(&body).unwrap_or_else(|_| unreadable())))
}

/// What an `_owner` that is not strata's JSON counts as: a holder on no
/// host, which a start watches like any other.
fn unreadable() -> Owner {
    Owner {
        host: "? (its _owner is not strata's)".into(),
        pid: 0,
        run: 0,
        beat: 0,
        boot: String::new(),
        pid_ns: String::new(),
        started: 0,
    }
}

fn write(remote: &Remote, owner: &Owner) -> Result<()> {
    let body = serde_json::to_vec(owner).map_err(|e| RuntimeError::Function(e.to_string()))?;
    remote.put_owner(&body)
}

fn in_use(remote: &Remote, holder: &Owner, why: &str) -> RuntimeError {
    RuntimeError::Usage(format!(
        "checkpoint storage {} is in use by another job: {} {why}; two jobs must not share a checkpoint prefix: give this one its own (if that job is gone, delete {}/_owner)",
        remote.url(),
        holder.describe(),
        remote.url()
    ))
}

impl Lease {
    /// Takes the lease on `remote`'s prefix (see the module docs), waiting
    /// up to [`EXPIRY`] when another host holds it, and renews it from a
    /// thread of its own.
    ///
    /// Errors: [`RuntimeError::Usage`] naming the holder when the prefix is
    /// in use; a request that failed.
    pub fn acquire(remote: Arc<Remote>) -> Result<Self> {
        let me = Owner::me();
        // A listing first: a bucket that is not there is refused here, not
        // made by the store's first write (some servers make one).
        remote.objects()?;
        if let Some(holder) = read(&remote)? {
            Self::wait_for_gone(&remote, &me, holder)?;
        }
        write(&remote, &me)?;
        std::thread::sleep(SETTLE);
        match read(&remote)? {
            Some(o) if o.same_run(&me) => {}
            Some(o) => return Err(in_use(&remote, &o, "started at the same moment")),
            None => {
                return Err(in_use(
                    &remote,
                    &unreadable(),
                    "removed the lease just taken",
                ))
            }
        }
        let quick = Arc::new(Remote::connect(remote.url(), BEAT)?);
        let stop = Arc::new(AtomicBool::new(false));
        let renewer = {
            let (remote, me, stop) = (quick.clone(), me.clone(), stop.clone());
            std::thread::Builder::new()
                .name("strata-lease".into())
                .spawn(move || renew(&remote, me, &stop))
                .map_err(|e| RuntimeError::Function(format!("lease thread: {e}")))?
        };
        Ok(Self {
            remote,
            quick,
            me,
            stop,
            renewer: Some(renewer),
        })
    }

    /// Returns once `holder`'s lease is gone, or refuses the start.
    fn wait_for_gone(remote: &Remote, me: &Owner, holder: Owner) -> Result<()> {
        if holder.local_to(me) {
            return match holder.alive() {
                true => Err(in_use(remote, &holder, "runs on this host")),
                false => Ok(()),
            };
        }
        eprintln!(
            "strata: {} was last held by {}: waiting {} s to see whether that job still runs",
            remote.url(),
            holder.describe(),
            EXPIRY.as_secs()
        );
        std::thread::sleep(EXPIRY);
        match read(remote)? {
            Some(now) if now != holder => Err(in_use(
                remote,
                &now,
                &format!("renewed its lease within the last {} s", EXPIRY.as_secs()),
            )),
            _ => Ok(()),
        }
    }

    /// Checks that the lease is still this job's: a checkpoint goes out
    /// only if it is.
    ///
    /// Errors: another job holds it now, or it is gone; a failed request.
    pub fn verify(&self) -> Result<()> {
        match read(&self.remote)? {
            Some(o) if o.same_run(&self.me) => Ok(()),
            other => Err(RuntimeError::Checkpoint {
                path: self.remote.url().into(),
                reason: format!(
                    "this job no longer holds the prefix ({}): no checkpoint may go out; two jobs must not share a checkpoint prefix",
                    other.map_or("its _owner is gone".into(), |o| format!(
                        "{} took it over",
                        o.describe()
                    ))
                ),
            }),
        }
    }
}

/// Renews the lease every [`BEAT`] until `stop`; stops renewing once
/// another job holds it (the next checkpoint's [`Lease::verify`] fails).
fn renew(remote: &Remote, mut me: Owner, stop: &AtomicBool) {
    let step = Duration::from_millis(100);
    loop {
        let mut waited = Duration::ZERO;
        while waited < BEAT {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(step);
            waited += step;
        }
        match read(remote) {
            Ok(Some(o)) if o.same_run(&me) => {
                me.beat += 1;
                let _ = write(remote, &me);
            }
            Ok(_) => return,
            // The store is away: the next beat tries again.
            Err(_) => {}
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.renewer.take() {
            let _ = t.join();
        }
        // On a thread of its own: a drop may happen on an async worker,
        // where the store's runtime cannot be blocked on.
        std::thread::scope(|s| {
            s.spawn(|| {
                if matches!(read(&self.quick), Ok(Some(o)) if o.same_run(&self.me)) {
                    let _ = self.quick.delete_owner();
                }
            });
        });
    }
}

impl Remote {
    /// The lease object's content, if there is one .
    pub(crate) fn read_owner(&self) -> Result<Option<Vec<u8>>> {
        let got = io()?.block_on(async { self.store.get(&self.path(OWNER)).await?.bytes().await });
        match got {
            Ok(body) => Ok(Some(body.to_vec())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(format_args!("reading {OWNER}"), e)),
        }
    }

    /// Writes the lease object.
    pub(crate) fn put_owner(&self, body: &[u8]) -> Result<()> {
        io()?
            .block_on(
                self.store
                    .put(&self.path(OWNER), PutPayload::from(body.to_vec())),
            )
            .map(|_| ())
            .map_err(|e| self.error(format_args!("writing {OWNER}"), e))
    }

    /// Deletes the lease object.
    pub(crate) fn delete_owner(&self) -> Result<()> {
        self.delete(vec![OWNER.to_owned()])
    }
}
