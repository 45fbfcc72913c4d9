//! Passwords: read from a file or the environment when a connection needs
//! them, never from the configuration, and never printed.

use super::bad;
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
    std::env::var(env).map_err(|_| {
        bad(
            &format!("{prefix}.username"),
            format!("user '{user}' has no password: set {env} or {prefix}.password-file"),
        )
    })
}

fn read_password_file(setting: &str, file: &Path) -> Result<String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| bad(setting, format!("cannot read {}: {e}", file.display())))?;
    let line = text.lines().next().unwrap_or("").trim_end_matches('\r');
    if line.is_empty() {
        return Err(bad(
            setting,
            format!("{} holds no password on its first line", file.display()),
        ));
    }
    Ok(line.to_owned())
}
