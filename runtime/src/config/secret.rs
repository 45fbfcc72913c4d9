//! Passwords: read from a file or the environment when a connection needs
//! them, never from the configuration, and never printed.

use super::{bad, text};
use crate::error::Result;
use std::path::Path;

/// The password in `file` (`setting` names the key that gave the path):
/// its first line, without the line end.
///
/// Errors: the file cannot be read or its first line is empty (naming the
/// file and the key, never the content).
/// The password of `user` (`prefix` is the keys' common prefix, e.g.
/// `state.l3`): the first line of `file` (`<prefix>.password-file`) if
/// given, else the environment variable `env`.
///
/// Errors: neither is set, or the file cannot be read (naming the key).
pub(super) fn password(prefix: &str, user: &str, file: Option<&Path>, env: &str) -> Result<String> {
    if let Some(file) = file {
        return read_password_file(&format!("{prefix}.password-file"), file);
    }
    std::env::var(env)
        .ok()
        .filter(|p| !p.is_empty())
        .ok_or_else(|| {
            bad(
                &format!("{prefix}.username"),
                format!("user '{user}' has no password: set {env} or {prefix}.password-file"),
            )
        })
}

/// Warns when other users may read the password file (any group or other
/// permission bit).
fn warn_if_shared(file: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::metadata(file) {
        if m.permissions().mode() & 0o077 != 0 {
            eprintln!(
                "strata: warning: password file {} can be read by other users (chmod 600 it)",
                file.display()
            );
        }
    }
}

fn read_password_file(setting: &str, file: &Path) -> Result<String> {
    use std::io::{BufRead, Read};
    let cannot = |e: String| bad(setting, format!("cannot read {}: {e}", file.display()));
    let meta = std::fs::metadata(file).map_err(|e| cannot(e.to_string()))?;
    if !meta.is_file() {
        return Err(cannot("not a regular file".into()));
    }
    warn_if_shared(file);
    let f = std::fs::File::open(file).map_err(|e| cannot(e.to_string()))?;
    // The first line only, and at most 64 KiB of it.
    let mut first = Vec::new();
    std::io::BufReader::new(f.take(64 << 10))
        .read_until(b'\n', &mut first)
        .map_err(|e| cannot(e.to_string()))?;
    let text = String::from_utf8(first).map_err(|_| cannot("not UTF-8 text".into()))?;
    let line = text.trim_end_matches(['\n', '\r']);
    if line.is_empty() {
        return Err(bad(
            setting,
            format!("{} holds no password on its first line", file.display()),
        ));
    }
    Ok(line.to_owned())
}

/// A username: not empty.
pub(super) fn user(key: &str, v: &toml::Value) -> Result<String> {
    let u = text(key, v)?.trim().to_owned();
    if u.is_empty() {
        return Err(bad(key, "an empty username"));
    }
    Ok(u)
}
