//! The real S3-compatible server the object-store tests run against
//! (`scripts/s3.sh start`; `scripts/test.sh` starts it): where it is, a
//! check that fails the test when it is not there (never a quiet skip), and
//! the settings a `strata` process needs to reach it.

use std::process::Command;
use std::time::Duration;

/// `127.0.0.1:<STRATA_S3_PORT or 9000>`.
pub fn address() -> String {
    let port = std::env::var("STRATA_S3_PORT").unwrap_or_else(|_| "9000".into());
    format!("127.0.0.1:{port}")
}

/// Panics (fails the test) unless the server answers.
pub fn require_s3() {
    let a = address();
    let addr: std::net::SocketAddr = a.parse().expect("S3 address");
    if std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).is_err() {
        panic!("no S3 server answers on {a}: start one with scripts/s3.sh start (scripts/test.sh does)");
    }
}

/// Gives `cmd` the AWS settings of the test server (those `scripts/s3.sh
/// env` prints).
pub fn with_s3_env(cmd: &mut Command) -> &mut Command {
    cmd.env("AWS_ENDPOINT", format!("http://{}", address()))
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "strata")
        .env("AWS_SECRET_ACCESS_KEY", "strata-test-secret")
}

/// A prefix of the test bucket no other run uses, `s3://strata/<tag>-<pid>-<nanos>`,
/// whose objects are deleted when it is dropped.
pub struct Prefix {
    /// `s3://strata/<name>`.
    pub url: String,
    name: String,
}

impl Prefix {
    /// A new, empty prefix.
    pub fn unique(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let name = format!("{tag}-{}-{}", std::process::id(), nanos % 1_000_000_000);
        Self {
            url: format!("s3://strata/{name}"),
            name,
        }
    }
}

impl Prefix {
    fn client() -> (object_store::aws::AmazonS3, tokio::runtime::Runtime) {
        let store = object_store::aws::AmazonS3Builder::new()
            .with_endpoint(format!("http://{}", address()))
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_bucket_name("strata")
            .with_access_key_id("strata")
            .with_secret_access_key("strata-test-secret")
            // The crash soak stops the server now and then: wait it out.
            .with_retry(object_store::RetryConfig {
                max_retries: 600,
                retry_timeout: Duration::from_secs(60),
                backoff: object_store::BackoffConfig {
                    max_backoff: Duration::from_secs(1),
                    ..Default::default()
                },
            })
            .build()
            .expect("S3 client");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        (store, rt)
    }

    /// The names of the objects under the prefix, relative to it.
    pub fn objects(&self) -> Vec<String> {
        self.sizes().into_iter().map(|(name, _)| name).collect()
    }

    /// The objects under the prefix with their sizes, names relative to it.
    pub fn sizes(&self) -> Vec<(String, u64)> {
        use futures::TryStreamExt;
        use object_store::ObjectStore;
        let (store, rt) = Self::client();
        let prefix = object_store::path::Path::from(self.name.as_str());
        let listed: Vec<_> = rt
            .block_on(store.list(Some(&prefix)).try_collect())
            .expect("listing the test prefix");
        listed
            .into_iter()
            .map(|o| {
                (
                    o.location.as_ref()[self.name.len() + 1..].to_owned(),
                    o.size,
                )
            })
            .collect()
    }

    /// Writes the object `rel` (relative to the prefix).
    pub fn put(&self, rel: &str, body: &[u8]) {
        use object_store::ObjectStoreExt;
        let (store, rt) = Self::client();
        let path = object_store::path::Path::from(format!("{}/{rel}", self.name));
        rt.block_on(store.put(&path, body.to_vec().into()))
            .expect("writing a test object");
    }

    /// The object `rel` (relative to the prefix).
    pub fn read(&self, rel: &str) -> Vec<u8> {
        use object_store::ObjectStoreExt;
        let (store, rt) = Self::client();
        let path = object_store::path::Path::from(format!("{}/{rel}", self.name));
        rt.block_on(async { store.get(&path).await?.bytes().await })
            .expect("reading a test object")
            .to_vec()
    }
}

impl Drop for Prefix {
    fn drop(&mut self) {
        use futures::{StreamExt, TryStreamExt};
        use object_store::ObjectStore;
        let (store, rt) = Self::client();
        let prefix = object_store::path::Path::from(self.name.as_str());
        let _ = rt.block_on(async {
            let paths = store.list(Some(&prefix)).map_ok(|o| o.location).boxed();
            store.delete_stream(paths).try_collect::<Vec<_>>().await
        });
    }
}

/// One line of `strata checkpoints list`.
#[derive(Debug, Clone, Copy)]
pub struct Listed {
    /// Its id.
    pub id: u64,
    /// Bytes of every file it lists.
    pub state: u64,
    /// Bytes of the files no earlier checkpoint listed.
    pub new: u64,
    /// The final checkpoint of a run that ended.
    pub is_final: bool,
}

/// `strata checkpoints list <url>`: every completed checkpoint in the
/// object store, oldest first (none: empty).
pub fn checkpoints(url: &str) -> Vec<Listed> {
    let o = with_s3_env(&mut Command::new(crate::strata_bin()))
        .args(["checkpoints", "list", url])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    if stderr.contains("holds no completed checkpoint") {
        return Vec::new();
    }
    assert!(o.status.success(), "checkpoints list {url}: {stderr}");
    let field = |line: &str, name: &str| -> u64 {
        let v = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .unwrap();
        v.trim_end_matches('B').parse().unwrap()
    };
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| Listed {
            id: l.split_whitespace().next().unwrap()[4..].parse().unwrap(),
            state: field(l, "state="),
            new: field(l, "new="),
            is_final: l.ends_with(" final"),
        })
        .collect()
}
