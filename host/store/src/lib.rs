//! svc-store: the state store — users, groups, grants, tokens, the table registry, scripts,
//! sync state, persistent metadata — its migrations, and the one audit writer ([`audit`]).
//!
//! Principal type: [`Store`], a cheap handle over one connection pool. Repositories return
//! [`StoreError`], which becomes `svc_core::Error` with `?`.
//!
//! Must never import poem or any svc crate above it (auth, catalog, query, the host); it
//! stands on `svc-core` alone.
//!
//! One set of SQL serves both backends through sqlx's `Any` driver: SQLite (the embedded
//! default, WAL mode) and PostgreSQL (for deployments with several replicas). To stay inside
//! what `Any` can carry, columns use only text, 64-bit integers, doubles and booleans;
//! timestamps are RFC 3339 UTC strings with a fixed width, so they sort as text.

pub mod audit;
mod bulk;
mod clause;
pub mod groups;
pub mod marketplace;
pub mod memory;
pub mod metadata;
mod migrate;
pub mod packs;
pub mod registry;
mod schema;
pub mod scripts;
pub mod sessions;
pub mod sync;
pub mod tokens;
pub mod usage;
pub mod users;
pub mod views;

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

pub use migrate::CURRENT_SCHEMA_VERSION;

/// Which database engine sits behind the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded default.
    Sqlite,
    /// Selected by a `postgres://` or `postgresql://` URL.
    Postgres,
}

impl Backend {
    fn from_url(url: &str) -> anyhow::Result<Self> {
        if url.starts_with("sqlite:") {
            Ok(Self::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres)
        } else {
            anyhow::bail!("unsupported database URL (expected sqlite: or postgres://): {url}")
        }
    }
}

/// WAL bytes after which a SQLite store checkpoints: SQLite's default of 1,000 pages at the
/// default 4 KiB page size.
const CHECKPOINT_BYTES: i64 = 4 * 1024 * 1024;

/// A handle on the state store; cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    /// Where the audit writer's batches go (see [`Store::begin_audit_write`]): on a SQLite
    /// file, a pool of one connection of its own; otherwise the pool itself.
    audit_pool: AnyPool,
    backend: Backend,
}

impl Store {
    /// Opens (creating the SQLite file and its directory if needed) without migrating.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        sqlx::any::install_default_drivers();
        let backend = Backend::from_url(url)?;
        let url = match backend {
            Backend::Sqlite => {
                prepare_sqlite_path(url)?;
                if url.contains('?') {
                    url.to_string()
                } else {
                    format!("{url}?mode=rwc")
                }
            }
            Backend::Postgres => url.to_string(),
        };
        let options = |connections: u32| {
            AnyPoolOptions::new()
                .max_connections(connections)
                .after_connect(move |conn, _meta| {
                    Box::pin(async move {
                        if backend == Backend::Sqlite {
                            // Takes effect only on a file not yet written (a new store): an
                            // existing one keeps the size it was made with. Every audited
                            // request adds a row to the audit table and its four indices;
                            // with 16 KiB pages, fewer page splits and WAL frames per row
                            // made storing one about a tenth cheaper than with the default
                            // 4 KiB.
                            sqlx::query("PRAGMA page_size = 16384")
                                .execute(&mut *conn)
                                .await?;
                            // A checkpoint every 4 MiB of WAL, whatever the page size (SQLite
                            // counts pages: 1,000 by default). With 16 KiB pages and the
                            // default count each checkpoint copied 16 MiB, and two of eight
                            // cached-sample passes showed a p99 of 20 ms where the others
                            // showed 3 (the likely cause, not proven); with this bound none
                            // of six did.
                            let page: i64 = sqlx::query_scalar("PRAGMA page_size")
                                .fetch_one(&mut *conn)
                                .await?;
                            sqlx::query(&format!(
                                "PRAGMA wal_autocheckpoint = {}",
                                CHECKPOINT_BYTES / page.max(512)
                            ))
                            .execute(&mut *conn)
                            .await?;
                            // Several processes (the server and `svc-server users ...`) share
                            // the file: wait for a writer instead of failing with SQLITE_BUSY.
                            sqlx::query("PRAGMA busy_timeout = 10000")
                                .execute(&mut *conn)
                                .await?;
                            sqlx::query("PRAGMA synchronous = NORMAL")
                                .execute(&mut *conn)
                                .await?;
                        }
                        Ok(())
                    })
                })
        };
        let opened = || format!("cannot open the state store at {}", redact_url(&url));
        let pool = options(match backend {
            Backend::Sqlite => 8,
            Backend::Postgres => 16,
        })
        .connect(&url)
        .await
        .with_context(opened)?;
        if backend == Backend::Sqlite {
            sqlx::query("PRAGMA journal_mode = WAL")
                .execute(&pool)
                .await?;
        }
        // The audit writer commits a batch every few milliseconds on a busy server. Through
        // the shared pool each batch took the connection idle longest, one whose page cache
        // the other connections' commits had made stale: SQLite drops a connection's whole
        // cache when the file changed since its last transaction, so every batch read the
        // five B-trees' pages back and allocated its cache afresh. A connection of its own
        // finds them where its last batch left them. (An in-memory database is one per
        // connection, so there it shares the pool.) Opened on the first batch: shell commands
        // rarely write one.
        let audit_pool = match (backend, sqlite_file(&url)) {
            (Backend::Sqlite, Some(_)) => options(1).connect_lazy(&url).with_context(opened)?,
            _ => pool.clone(),
        };
        Ok(Self {
            pool,
            audit_pool,
            backend,
        })
    }

    /// Opens the store and brings its schema up to date.
    pub async fn open(url: &str) -> anyhow::Result<Self> {
        let store = Self::connect(url).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// Opens a store that already exists and brings its schema up to date; refuses to create
    /// one. Shell commands use it, so one run from the wrong directory does not make an empty
    /// store there and then report that nobody exists in it.
    pub async fn open_existing(url: &str) -> anyhow::Result<Self> {
        let file = sqlite_file(url);
        let missing = || {
            anyhow::anyhow!(
                "no svc store at {}; pass --data-dir or SVC_DATA_DIR (or --database-url) to point \
                 at one, or create it with `svc-server migrate`",
                file.as_ref()
                    .map_or_else(|| redact_url(url), |p| p.display().to_string())
            )
        };
        if file.as_ref().is_some_and(|p| !p.exists()) {
            return Err(missing());
        }
        let store = Self::connect(url).await?;
        if store.schema_version().await? == 0 {
            store.close().await;
            return Err(missing());
        }
        store.migrate().await?;
        Ok(store)
    }

    /// Runs every pending migration step; a no-op on a current schema.
    pub async fn migrate(&self) -> anyhow::Result<()> {
        migrate::run(self).await
    }

    /// The highest migration step recorded in the store (0 for an unversioned database).
    pub async fn schema_version(&self) -> anyhow::Result<i64> {
        migrate::recorded_version(self).await
    }

    /// The connection pool, for repositories.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// A transaction that writes. On SQLite it takes the write lock at `BEGIN IMMEDIATE`:
    /// a deferred transaction that reads and then writes fails at once with SQLITE_BUSY
    /// (the busy timeout does not apply) whenever another connection commits in between,
    /// and the audit writer commits every few milliseconds on a busy server.
    ///
    /// The begin runs on a task of its own because sqlx's SQLite begin is not cancel-safe:
    /// after the `BEGIN` runs it checks the connection with a second round trip to the
    /// connection's thread, and a caller dropped during that round trip (a client that hung
    /// up) returned the connection to the pool inside the transaction, holding the write
    /// lock until the connection closed; every other writer waited out the busy timeout and
    /// failed. On its own task the begin always finishes, and a `Transaction` nobody awaits
    /// any more is dropped there, which rolls it back.
    pub async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error> {
        Self::begin_write_on(self.pool.clone(), self.backend).await
    }

    /// [`Store::begin_write`] on the audit writer's own connection (see `audit_pool`).
    pub(crate) async fn begin_audit_write(
        &self,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error> {
        Self::begin_write_on(self.audit_pool.clone(), self.backend).await
    }

    async fn begin_write_on(
        pool: AnyPool,
        backend: Backend,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error> {
        let begin = tokio::spawn(async move {
            match backend {
                Backend::Sqlite => pool.begin_with("BEGIN IMMEDIATE").await,
                Backend::Postgres => pool.begin().await,
            }
        });
        match begin.await {
            Ok(begun) => begun,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Only when the runtime is shutting down.
            Err(e) => Err(sqlx::Error::Io(std::io::Error::other(e))),
        }
    }

    /// The database engine in use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Closes every connection (used before exit so SQLite checkpoints its WAL).
    pub async fn close(&self) {
        self.audit_pool.close().await;
        self.pool.close().await;
    }
}

/// The default store location inside a data directory.
pub fn default_sqlite_url(data_dir: &Path) -> String {
    format!(
        "sqlite://{}",
        data_dir.join("state").join("svc.db").display()
    )
}

/// The file behind a SQLite URL; None for other backends and in-memory databases.
pub fn sqlite_file(url: &str) -> Option<PathBuf> {
    if !url.starts_with("sqlite:") {
        return None;
    }
    let path = url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:")
        .split('?')
        .next()
        .unwrap_or_default();
    (!path.is_empty() && path != ":memory:").then(|| PathBuf::from(path))
}

fn prepare_sqlite_path(url: &str) -> anyhow::Result<()> {
    let Some(path) = sqlite_file(url) else {
        return Ok(());
    };
    if let Some(parent) = path.parent() {
        if !parent.as_os_str().is_empty() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
    }
    Ok(())
}

/// Hides a password in a database URL before it reaches a log line or an error message.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// A state-store failure. Repositories return it; upper crates turn it into the domain
/// error with `?` (a 500 whose cause is logged, or a 400 for text the database cannot hold).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct StoreError(#[from] sqlx::Error);

impl StoreError {
    /// Whether a unique constraint refused the write (a duplicate name or email).
    pub fn is_unique_violation(&self) -> bool {
        self.0
            .as_database_error()
            .is_some_and(|db| db.is_unique_violation())
    }

    /// A unique-constraint violation as a 409 with `message`; anything else as usual.
    pub fn conflict_on_duplicate(self, message: impl Into<String>) -> svc_core::Error {
        if self.is_unique_violation() {
            svc_core::Error::conflict(message)
        } else {
            self.into()
        }
    }
}

impl From<StoreError> for svc_core::Error {
    /// Store failures are the server's, except text PostgreSQL cannot hold (a NUL byte, code
    /// 22021): that came from the request, and is refused as such on either backend's terms.
    fn from(e: StoreError) -> Self {
        match &e.0 {
            sqlx::Error::Database(db) if db.code().as_deref() == Some("22021") => {
                Self::bad_request("The request holds text with a NUL byte, which is not allowed")
            }
            _ => Self::internal(e),
        }
    }
}

/// Reads a boolean column: PostgreSQL stores `BOOLEAN`, SQLite an integer 0/1.
pub(crate) fn flag(row: &AnyRow, column: &str) -> Result<bool, StoreError> {
    match row.try_get::<bool, _>(column) {
        Ok(b) => Ok(b),
        Err(_) => Ok(row.try_get::<Option<i64>, _>(column)?.unwrap_or(0) != 0),
    }
}

/// A query as the repositories build it.
type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

/// Runs a query expected to return at most one row and maps it.
async fn fetch_opt<T>(
    store: &Store,
    q: AnyQuery<'_>,
    map: fn(&AnyRow) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError> {
    q.fetch_optional(store.pool())
        .await?
        .as_ref()
        .map(map)
        .transpose()
}

/// Runs a query and maps every row.
async fn fetch_vec<T>(
    store: &Store,
    q: AnyQuery<'_>,
    map: fn(&AnyRow) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    q.fetch_all(store.pool()).await?.iter().map(map).collect()
}

#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing {
    //! Store fixtures: a fresh SQLite file per test, and a fresh PostgreSQL database when
    //! `SVC_TEST_DATABASE_URL` is set.
    use super::*;

    /// Days the seeded audit rows span.
    const DAYS: i64 = 90;
    /// Rows per seeding statement.
    const SEED_CHUNK: i64 = 500_000;

    /// The seeding INSERT for rows `$1..=$2` of `n` spread over the 90 days ending at `end`
    /// (unix seconds): one statement per chunk, every value derived from the row number.
    fn seed_sql(backend: Backend, n: i64, end: i64) -> String {
        let span = DAYS * 86_400;
        let base = end - span;
        // h: a well-mixed hash of the row number; every column below is a function of it.
        let (source, ts) = match backend {
            Backend::Sqlite => (
                "(WITH RECURSIVE seq(i) AS (SELECT CAST($1 AS INTEGER) UNION ALL SELECT i + 1 FROM seq WHERE i < CAST($2 AS INTEGER)) \
                 SELECT i, (i * 2654435761) % 4294967296 AS h FROM seq)".to_owned(),
                format!(
                    "strftime('%Y-%m-%dT%H:%M:%S', {base} + (i * {span}) / {n}, 'unixepoch') || '.' || \
                     printf('%06d', ((i * {span}) % {n}) * 1000000 / {n}) || 'Z'"
                ),
            ),
            Backend::Postgres => (
                "(SELECT i, (i * 2654435761) % 4294967296 AS h FROM generate_series(CAST($1 AS BIGINT), CAST($2 AS BIGINT)) AS g(i))".to_owned(),
                format!(
                    "to_char(to_timestamp({base} + (i * {span}) / {n}) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') || '.' || \
                     lpad((((i * {span}) % {n}) * 1000000 / {n})::text, 6, '0') || 'Z'"
                ),
            ),
        };
        let user = "CASE WHEN h % 100 < 5 THEN NULL \
                    ELSE 'user-' || (((h / 100) % 500) * ((h / 100) % 500) / 500) END";
        let kind = "CASE WHEN h % 100 < 5 THEN 'scheduler' WHEN h % 100 < 55 THEN 'cli' \
                    WHEN h % 100 < 85 THEN 'web' ELSE 'api' END";
        let action = "CASE WHEN (h / 7) % 100 < 35 THEN 'catalog.sample' \
                      WHEN (h / 7) % 100 < 50 THEN 'catalog.schema' \
                      WHEN (h / 7) % 100 < 58 THEN 'catalog.list' \
                      WHEN (h / 7) % 100 < 75 THEN 'query.local' \
                      WHEN (h / 7) % 100 < 79 THEN 'query.remote' \
                      WHEN (h / 7) % 100 < 84 THEN 'scan' \
                      WHEN (h / 7) % 100 < 87 THEN 'activity.read' \
                      WHEN (h / 7) % 100 < 89 THEN 'session.upload' \
                      WHEN (h / 7) % 100 < 92 THEN 'sync.table' \
                      WHEN (h / 7) % 100 < 94 THEN 'data.download' \
                      WHEN (h / 7) % 100 < 96 THEN 'usage.summary' \
                      WHEN (h / 7) % 100 < 98 THEN 'token.create' ELSE 'user.update' END";
        let resource = "CASE WHEN (h / 7) % 100 BETWEEN 50 AND 57 THEN 'catalog' \
                        ELSE 'table:t' || ((h / 13) % 2000) END";
        // Query rows carry their SQL (one of 20 tables: what `q` looks for), others a count.
        let params = "CASE WHEN (h / 7) % 100 BETWEEN 58 AND 78 \
                      THEN '{\"sql\":\"SELECT count(*) FROM orders_' || ((h / 17) % 20) || ' WHERE day > 1\",\"rows_returned\":' || (h % 1000) || '}' \
                      ELSE '{\"rows_returned\":' || (h % 1000) || '}' END";
        let result = "CASE WHEN (h / 19) % 1000 < 15 THEN 'error.500' \
                      WHEN (h / 19) % 1000 < 25 THEN 'error.403' \
                      WHEN (h / 19) % 1000 < 30 THEN 'error.400' ELSE 'success' END";
        let duration = "CASE WHEN (h / 23) % 100 < 90 THEN (h / 29) % 50 \
                        WHEN (h / 23) % 100 < 99 THEN 50 + (h / 29) % 500 \
                        ELSE 500 + (h / 29) % 10000 END";
        format!(
            "INSERT INTO audit_log (id, timestamp, user_id, action, resource, params, client_ip, \
             client_kind, correlation_id, result, duration_ms) \
             SELECT 'seed-' || i, {ts}, {user}, {action}, {resource}, {params}, \
             '10.0.' || (h % 256) || '.' || ((h / 256) % 256), {kind}, 'req-' || i, {result}, {duration} \
             FROM {source} AS s"
        )
    }

    /// Seeds `n` audit rows over the 90 days before now (500 users, a realistic mix of
    /// actions, results and durations), in chunks; prints how long it took. For benchmarks.
    pub async fn seed_audit(store: &Store, n: i64) {
        let started = std::time::Instant::now();
        let sql = seed_sql(store.backend(), n, chrono::Utc::now().timestamp());
        let mut from = 1;
        while from <= n {
            let to = (from + SEED_CHUNK - 1).min(n);
            let mut tx = store.pool().begin().await.unwrap();
            sqlx::query(&sql)
                .bind(from)
                .bind(to)
                .execute(&mut *tx)
                .await
                .unwrap();
            tx.commit().await.unwrap();
            eprint!(
                "\r  seeding: {to}/{n} rows ({:.0} rows/s)   ",
                to as f64 / started.elapsed().as_secs_f64()
            );
            from = to + 1;
        }
        if store.backend() == Backend::Postgres {
            // What autovacuum does after a bulk load; SQLite's planner runs without statistics,
            // as the server's store does.
            sqlx::query("ANALYZE audit_log")
                .execute(store.pool())
                .await
                .unwrap();
        }
        eprintln!();
        println!(
            "  seeded {n} rows over {DAYS} days in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }

    /// A migrated store on a temporary SQLite file; keep the directory alive.
    pub async fn sqlite() -> (Store, TempDir) {
        let dir = TempDir::new();
        let url = default_sqlite_url(&dir.0);
        (Store::open(&url).await.unwrap(), dir)
    }

    /// A new, empty PostgreSQL database (not migrated), or None with a printed notice.
    pub async fn postgres_url() -> Option<String> {
        let Ok(admin_url) = std::env::var("SVC_TEST_DATABASE_URL") else {
            eprintln!("notice: SVC_TEST_DATABASE_URL unset; skipping the PostgreSQL run");
            return None;
        };
        let name = format!("svc_unit_{}", uuid::Uuid::new_v4().simple());
        let admin = Store::connect(&admin_url).await.unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(admin.pool())
            .await
            .unwrap();
        admin.close().await;
        let base = admin_url.rsplit_once('/').map(|(b, _)| b).unwrap();
        Some(format!("{base}/{name}"))
    }

    /// Every backend the tests can reach: SQLite always, PostgreSQL when configured.
    pub async fn all_backends() -> Vec<(Store, Option<TempDir>)> {
        let (sqlite, dir) = sqlite().await;
        let mut v = vec![(sqlite, Some(dir))];
        if let Some(url) = postgres_url().await {
            v.push((Store::open(&url).await.unwrap(), None));
        }
        v
    }

    /// A temporary directory removed on drop.
    pub struct TempDir(pub std::path::PathBuf);

    impl TempDir {
        /// Creates a unique directory under the system temp dir.
        pub fn new() -> Self {
            let p =
                std::env::temp_dir().join(format!("svc-unit-{}", uuid::Uuid::new_v4().simple()));
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }
    }

    impl Default for TempDir {
        fn default() -> Self {
            Self::new()
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::registry::{QueryMode, RegistryRow};
    use super::testing;
    use super::users::Guarded;

    /// The users page: found by e-mail or name in any case (LIKE wildcards are literal),
    /// paged by e-mail with the count of every page, and each user's groups in one read.
    #[tokio::test]
    async fn user_pages_find_by_text_and_carry_their_groups() {
        for (store, _dir) in testing::all_backends().await {
            store.seed_system_groups().await.unwrap();
            let mut ids = Vec::new();
            for (email, name) in [
                ("zoe@example.com", Some("Zoe Percent%")),
                ("ana@example.com", Some("Ana")),
                ("bob@corp.example", None),
            ] {
                ids.push(store.create_user(email, name, None).await.unwrap().id);
            }
            let emails = |users: &[super::users::User]| {
                users.iter().map(|u| u.email.clone()).collect::<Vec<_>>()
            };
            let (all, total) = store.users_page(None, 2, 0).await.unwrap();
            assert_eq!(
                (emails(&all), total),
                (
                    vec!["ana@example.com".to_owned(), "bob@corp.example".to_owned()],
                    3
                )
            );
            let (rest, _) = store.users_page(None, 2, 2).await.unwrap();
            assert_eq!(emails(&rest), ["zoe@example.com"]);
            let (found, total) = store.users_page(Some("EXAMPLE.COM"), 10, 0).await.unwrap();
            assert_eq!((found.len(), total), (2, 2));
            let (found, _) = store.users_page(Some("percent%"), 10, 0).await.unwrap();
            assert_eq!(emails(&found), ["zoe@example.com"], "found by name");
            let (found, total) = store.users_page(Some("%"), 10, 0).await.unwrap();
            assert_eq!((found.len(), total), (1, 1), "% is literal");

            let admin = store.group_by_name("Admin").await.unwrap().unwrap();
            let team = store.create_group("team", None, "t").await.unwrap();
            store
                .add_member(&team.id, &ids[0], "admin", "t")
                .await
                .unwrap();
            store
                .add_member(&admin.id, &ids[0], "admin", "t")
                .await
                .unwrap();
            store
                .add_member(&team.id, &ids[1], "admin", "t")
                .await
                .unwrap();
            let groups = store.group_names_of_users(&ids).await.unwrap();
            assert_eq!(groups[&ids[0]], ["Admin", "team"], "system groups first");
            assert_eq!(groups[&ids[1]], ["team"]);
            assert!(!groups.contains_key(&ids[2]));
            assert!(store.group_names_of_users(&[]).await.unwrap().is_empty());
            assert_eq!(
                store.first_members(&team.id, 1).await.unwrap(),
                ["ana@example.com"]
            );
        }
    }

    /// A new SQLite store is made with 16 KiB pages; one made before keeps its own size and
    /// opens as before.
    #[tokio::test]
    async fn new_sqlite_stores_use_16_kib_pages_and_older_ones_keep_theirs() {
        // (page size, pages of WAL between checkpoints)
        let page_and_checkpoint = |store: &super::Store| {
            let pool = store.pool().clone();
            async move {
                let mut conn = pool.acquire().await.unwrap();
                let page = sqlx::query_scalar::<_, i64>("PRAGMA page_size")
                    .fetch_one(&mut *conn)
                    .await
                    .unwrap();
                let checkpoint = sqlx::query_scalar::<_, i64>("PRAGMA wal_autocheckpoint")
                    .fetch_one(&mut *conn)
                    .await
                    .unwrap();
                (page, checkpoint)
            }
        };
        let (store, _dir) = testing::sqlite().await;
        assert_eq!(page_and_checkpoint(&store).await, (16_384, 256));

        let dir = testing::TempDir::new();
        let url = super::default_sqlite_url(&dir.0);
        super::prepare_sqlite_path(&url).unwrap();
        {
            let old = sqlx::any::AnyPoolOptions::new()
                .max_connections(1)
                .connect(&format!("{url}?mode=rwc"))
                .await
                .unwrap();
            sqlx::query("PRAGMA page_size = 4096")
                .execute(&old)
                .await
                .unwrap();
            sqlx::query("CREATE TABLE made_before (x INTEGER)")
                .execute(&old)
                .await
                .unwrap();
            old.close().await;
        }
        let store = super::Store::open(&url).await.unwrap();
        assert_eq!(page_and_checkpoint(&store).await, (4_096, 1_024));
        store.seed_system_groups().await.unwrap();
        assert!(store.group_by_name("Admin").await.unwrap().is_some());
    }

    /// The same repository calls give the same answers on SQLite and PostgreSQL.
    #[tokio::test]
    async fn repositories_behave_the_same_on_both_backends() {
        for (store, _dir) in testing::all_backends().await {
            store.seed_system_groups().await.unwrap();
            store.seed_system_groups().await.unwrap();
            let u = store
                .create_user("a@example.com", Some("A"), None)
                .await
                .unwrap();
            assert!(u.active);
            assert!(
                store
                    .create_user("a@example.com", None, None)
                    .await
                    .is_err(),
                "unique e-mail"
            );
            assert!(!store.is_admin(&u.id).await.unwrap());
            let admin = store.group_by_name("Admin").await.unwrap().unwrap();
            assert!(admin.is_system);
            assert!(store
                .add_member(&admin.id, &u.id, "admin", "t")
                .await
                .unwrap());
            assert!(
                !store
                    .add_member(&admin.id, &u.id, "admin", "t")
                    .await
                    .unwrap(),
                "idempotent"
            );
            assert!(store.is_admin(&u.id).await.unwrap());
            assert_eq!(store.count_active_admins().await.unwrap(), 1);
            // The last active admin stays: deactivation, deletion and removal are refused.
            assert_eq!(
                store.set_user_active(&u.id, false, None).await.unwrap(),
                Guarded::LastAdmin
            );
            assert_eq!(store.delete_user(&u.id).await.unwrap(), Guarded::LastAdmin);
            assert_eq!(
                store.remove_member(&admin.id, &u.id).await.unwrap(),
                Guarded::LastAdmin
            );
            let b = store
                .create_user("b@example.com", None, None)
                .await
                .unwrap();
            store
                .add_member(&admin.id, &b.id, "admin", "t")
                .await
                .unwrap();
            assert_eq!(
                store.set_user_active(&u.id, false, None).await.unwrap(),
                Guarded::Applied
            );
            assert_eq!(store.count_active_admins().await.unwrap(), 1);
            assert!(!store.user_by_id(&u.id).await.unwrap().unwrap().active);

            let g = store.create_group("finance", Some("d"), "t").await.unwrap();
            store.add_member(&g.id, &u.id, "admin", "t").await.unwrap();
            let grant = store
                .create_grant(&g.id, "table", "orders", "t")
                .await
                .unwrap();
            assert_eq!(
                store.granted_table_ids(&u.id).await.unwrap(),
                vec!["orders".to_string()]
            );
            assert_eq!(
                store.list_grants(None, Some("table")).await.unwrap(),
                vec![grant.clone()]
            );
            assert_eq!(store.list_grants(Some("nope"), None).await.unwrap(), vec![]);
            let names: Vec<String> = store
                .list_groups()
                .await
                .unwrap()
                .into_iter()
                .map(|g| g.name)
                .collect();
            assert_eq!(names, ["Admin", "Everyone", "finance"]);
            store.delete_group(&g.id).await.unwrap();
            assert!(store.granted_table_ids(&u.id).await.unwrap().is_empty());

            let row = RegistryRow {
                id: "orders".into(),
                name: "Orders".into(),
                source_type: "local".into(),
                bucket: Some("b".into()),
                source_table: None,
                query_mode: QueryMode::Materialized,
                source_query: Some("SELECT 1".into()),
                primary_key: None,
                cursor_column: None,
                sync_schedule: None,
                description: None,
                registered_by: Some("first".into()),
                registered_at: None,
                updated_at: None,
            };
            store.upsert_table(&row).await.unwrap();
            store
                .upsert_table(&RegistryRow {
                    registered_by: Some("second".into()),
                    ..row.clone()
                })
                .await
                .unwrap();
            let stored = store.table_by_id("orders").await.unwrap().unwrap();
            let g2 = store.create_group("readers", None, "t").await.unwrap();
            store.add_member(&g2.id, &u.id, "admin", "t").await.unwrap();
            let (_, granted) = store
                .table_with_grant("orders", &u.id)
                .await
                .unwrap()
                .unwrap();
            assert!(!granted);
            store
                .create_grant(&g2.id, "table", "orders", "t")
                .await
                .unwrap();
            let (row, granted) = store
                .table_with_grant("orders", &u.id)
                .await
                .unwrap()
                .unwrap();
            assert!(granted && row.id == "orders");
            assert!(store
                .table_with_grant("nope", &u.id)
                .await
                .unwrap()
                .is_none());
            let who = store.identity(&u.id, None).await.unwrap().unwrap();
            assert!(who.is_admin && who.pat.is_none() && !who.user.active);
            assert!(store.identity("nobody", None).await.unwrap().is_none());
            assert_eq!(
                stored.registered_by.as_deref(),
                Some("first"),
                "first registrant kept"
            );
            assert_eq!(stored.query_mode, QueryMode::Materialized);
            assert!(store.delete_table("orders").await.unwrap());
            assert!(store.table_by_id("orders").await.unwrap().is_none());
            assert_eq!(store.delete_user(&u.id).await.unwrap(), Guarded::Applied);
            assert_eq!(store.delete_user(&u.id).await.unwrap(), Guarded::Missing);
            assert_eq!(store.delete_user(&b.id).await.unwrap(), Guarded::LastAdmin);
            assert_eq!(store.count_users().await.unwrap(), 1);
            store.close().await;
        }
    }

    /// A write transaction that reads before it writes survives another connection's commit
    /// in between (the audit writer's, on a busy server): on SQLite the other writer waits
    /// for it instead of making its first write fail with SQLITE_BUSY.
    #[tokio::test]
    async fn a_write_transaction_that_reads_first_survives_a_concurrent_commit() {
        for (store, _dir) in testing::all_backends().await {
            let mut tx = store.begin_write().await.unwrap();
            sqlx::query("SELECT count(*) AS n FROM audit_log")
                .fetch_one(&mut *tx)
                .await
                .unwrap();
            let other = store.clone();
            let concurrent = tokio::spawn(async move {
                let row = crate::audit::record_for_bench(
                    &crate::audit::Actor::scheduler(),
                    crate::audit::Event::new("other.writer"),
                );
                other.insert_audit_batch(&[row]).await
            });
            // Long enough for the other connection to commit, had it not been made to wait.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            sqlx::query("DELETE FROM audit_log WHERE action = 'nothing.here'")
                .execute(&mut *tx)
                .await
                .expect("the write after the read");
            tx.commit().await.unwrap();
            concurrent
                .await
                .unwrap()
                .expect("the other writer, after the commit");
        }
    }

    /// A caller dropped part-way through `begin_write` (a client that hung up mid-request)
    /// leaves no transaction open on a pooled connection. On SQLite such a transaction would
    /// hold the write lock until the connection closed: every other writer would wait out
    /// the busy timeout and fail, and the audit writer would lose its rows.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_transaction_abandoned_while_it_begins_leaves_no_transaction_behind() {
        use std::future::Future;
        use std::task::Poll;
        use std::time::Duration;
        for (store, _dir) in testing::all_backends().await {
            // Drop the begin after 1, 2, ... polls, with the connection's worker given time
            // to move on between polls, so some drops land after the BEGIN ran.
            let attempts = (1..=6).flat_map(|polls| [50, 100, 200, 400, 800].map(|us| (polls, us)));
            for (polls, pause_us) in attempts {
                let mut begin = std::pin::pin!(store.begin_write());
                for _ in 0..polls {
                    let ready =
                        std::future::poll_fn(|cx| Poll::Ready(begin.as_mut().poll(cx).is_ready()))
                            .await;
                    if ready {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(pause_us));
                }
            }
            // Whatever the dropped begins left running has settled by now.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let mut held = Vec::new();
            for _ in 0..store.pool().size() {
                held.push(store.pool().acquire().await.unwrap());
            }
            for conn in &held {
                assert!(
                    !sqlx::Connection::is_in_transaction(&**conn),
                    "a pooled connection was left inside a transaction"
                );
            }
            drop(held);
            for i in 0..20 {
                let write = async {
                    let mut tx = store.begin_write().await?;
                    sqlx::query("DELETE FROM audit_log WHERE action = 'nothing.here'")
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await
                };
                tokio::time::timeout(Duration::from_secs(3), write)
                    .await
                    .unwrap_or_else(|_| panic!("write {i} waited on an abandoned transaction"))
                    .unwrap_or_else(|e| panic!("write {i}: {e}"));
            }
        }
    }
}
