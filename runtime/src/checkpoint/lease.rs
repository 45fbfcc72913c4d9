//! One job per object store prefix: a lease on `--checkpoint-dir s3://…`.
//!
//! A local checkpoint directory is kept to one job by its lock file; a
//! prefix in an object store has no such lock, and two jobs writing one
//! prefix would delete each other's checkpoints (each start sweeps what its
//! own checkpoints do not list). So a job that starts on a prefix holds the
//! object `_owner` there (this host, this process, a beat counter) and
//! renews it every [`BEAT`]:
//!
//! * no `_owner`, or one this host's dead process left: taken at once;
//! * one a live process of this host holds: refused at once;
//! * one another host holds: watched for [`EXPIRY`]; renewed meanwhile, the
//!   prefix is in use and the start is refused; unchanged, its holder is
//!   gone (SIGKILLed, its machine lost) and it is taken.
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

use super::remote::Remote;
use crate::error::{Result, RuntimeError};
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
}

impl Owner {
    fn me() -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "unknown-host".into());
        let run = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Self {
            host,
            pid: std::process::id(),
            run,
            beat: 0,
        }
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
        host: "an unknown host (unreadable _owner)".into(),
        pid: 0,
        run: 0,
        beat: 0,
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
        if holder.host == me.host {
            let alive = std::path::Path::new(&format!("/proc/{}", holder.pid)).exists();
            return match alive && holder.pid != me.pid {
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
