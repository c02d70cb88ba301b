//! The data dir's permissions and the process limits a server needs.
//!
//! Secrets live in the data dir (pepper, sealed seed, store, operator socket, backups), so it
//! is created 0700 and every file in it 0600 whatever the caller's umask: the process umask is
//! set to 077 before anything is created, files that exist with wider modes are narrowed at
//! start, and a data dir that others can write to is refused.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use anyhow::Context;

/// Sets the process umask to 077, so every file and directory the process creates (store,
/// pepper, seed, socket, backups) is private to its user whatever umask it was started with.
/// Call before any thread is started.
pub fn set_private_umask() {
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
}

/// Creates the data dir (mode 0700, parents included) or checks an existing one: refuses a
/// data dir that its group or others may write to, narrows one they may only read or list
/// (0755, 0750, ...) to 0700 with a warning, and narrows any file in it that its group or
/// others may read or write to 0600.
///
/// Errors: the path names the data dir, e.g. "the data dir /srv/a is writable by its group or
/// others (mode 777); run `chmod 700 /srv/a`".
pub fn prepare(dir: &Path) -> anyhow::Result<()> {
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating the data dir {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("setting the mode of the data dir {}", dir.display()))?;
    }
    let meta = std::fs::metadata(dir)
        .with_context(|| format!("reading the data dir {}", dir.display()))?;
    if !meta.is_dir() {
        anyhow::bail!("the data dir {} is not a directory", dir.display());
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        anyhow::bail!(
            "the data dir {} is writable by its group or others (mode {:o}); refusing to start: run `chmod 700 {}`",
            dir.display(),
            mode,
            dir.display()
        );
    }
    if mode & 0o077 != 0 {
        // Readable or listable by others: the files are 0600 below, but their names (and a
        // backup's) should not be listed either (docs/decisions.md, data dir).
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode & 0o700))
            .with_context(|| format!("narrowing the mode of the data dir {}", dir.display()))?;
        tracing::warn!(path = %dir.display(), mode = format!("{mode:o}"), "narrowed the mode of the data dir to 700");
    }
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry?;
        let meta = entry.metadata()?;
        let path = entry.path();
        let mode = meta.permissions().mode() & 0o7777;
        let private = if meta.is_dir() { 0o700 } else { 0o600 };
        if mode & 0o077 != 0 && (meta.is_file() || meta.is_dir()) {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & private))
                .with_context(|| format!("narrowing the mode of {}", path.display()))?;
            tracing::warn!(path = %path.display(), mode = format!("{mode:o}"), "narrowed the mode of a file in the data dir");
        }
    }
    Ok(())
}

/// Raises the soft open-files limit to the hard limit (each client connection holds one
/// file handle; the systemd unit sets `LimitNOFILE`). Logs and carries on when it cannot.
pub fn raise_open_files_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let cur = getrlimit(Resource::Nofile);
    if cur.current == cur.maximum {
        return;
    }
    let want = Rlimit {
        current: cur.maximum,
        maximum: cur.maximum,
    };
    match setrlimit(Resource::Nofile, want) {
        Ok(()) => tracing::debug!(limit = ?cur.maximum, "raised the open-files limit"),
        Err(e) => {
            tracing::warn!(error = %e, soft = ?cur.current, "could not raise the open-files limit")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_writable_data_dir_is_refused_and_wide_dirs_and_files_are_narrowed() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("data");
        prepare(&d).unwrap();
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let f = d.join("pepper");
        std::fs::write(&f, "x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        prepare(&d).unwrap();
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // Readable and listable by others, not writable: narrowed to 0700.
        for wide in [0o755, 0o750, 0o705] {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(wide)).unwrap();
            prepare(&d).unwrap();
            let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{wide:o}");
        }
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o770)).unwrap();
        let e = prepare(&d).unwrap_err().to_string();
        assert!(
            e.contains(&d.display().to_string()) && e.contains("writable"),
            "{e}"
        );
    }
}
