//! [`Q`], a statement written once for both engines with its values, and
//! [`Row`], a row read by column name.

use super::{Conn, StoreError, Target};
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;

/// A bound value.
#[derive(Debug, Clone)]
enum Arg {
    I64(Option<i64>),
    Text(Option<String>),
    Bytes(Option<Vec<u8>>),
}

/// `($first, …)`: `n` numbered placeholders for an `IN` list, on both engines.
pub fn placeholders(first: usize, n: usize) -> String {
    let list: Vec<String> = (first..first + n).map(|i| format!("${i}")).collect();
    format!("({})", list.join(", "))
}

/// A query written once for both engines: `$n` placeholders, values bound in order.
#[derive(Debug, Clone)]
pub struct Q {
    sql: String,
    args: Vec<Arg>,
}

macro_rules! bind_all {
    ($q:expr, $args:expr) => {{
        let mut q = $q;
        for a in $args {
            q = match a {
                Arg::I64(v) => q.bind(v),
                Arg::Text(v) => q.bind(v),
                Arg::Bytes(v) => q.bind(v),
            };
        }
        q
    }};
}

impl Q {
    /// A query.
    pub fn new(sql: impl Into<String>) -> Self {
        Self { sql: sql.into(), args: Vec::new() }
    }

    /// Binds text.
    pub fn text(mut self, v: impl Into<String>) -> Self {
        self.args.push(Arg::Text(Some(v.into())));
        self
    }

    /// Binds each of `values` as text, in order (an `IN` list's values,
    /// after [`placeholders`]).
    pub fn texts<S: Into<String>>(self, values: impl IntoIterator<Item = S>) -> Self {
        values.into_iter().fold(self, Q::text)
    }

    /// Binds text or NULL.
    pub fn opt_text(mut self, v: Option<impl Into<String>>) -> Self {
        self.args.push(Arg::Text(v.map(Into::into)));
        self
    }

    /// Binds bytes (PostgreSQL `BYTEA`, SQLite `BLOB`).
    pub fn bytes(mut self, v: impl Into<Vec<u8>>) -> Self {
        self.args.push(Arg::Bytes(Some(v.into())));
        self
    }

    /// Binds an integer.
    pub fn int(mut self, v: i64) -> Self {
        self.args.push(Arg::I64(Some(v)));
        self
    }

    /// Binds an integer or NULL.
    pub fn opt_int(mut self, v: Option<i64>) -> Self {
        self.args.push(Arg::I64(v));
        self
    }

    /// Runs a statement; returns the number of rows it changed.
    pub async fn execute(self, conn: &mut Conn) -> Result<u64, StoreError> {
        let sql = sqlx::AssertSqlSafe(self.sql);
        Ok(match conn.target() {
            Target::Sqlite(c) => bind_all!(sqlx::query(sql), self.args).execute(c).await?.rows_affected(),
            Target::Postgres(c) => bind_all!(sqlx::query(sql), self.args).execute(c).await?.rows_affected(),
        })
    }

    /// At most one row.
    pub async fn fetch_optional(self, conn: &mut Conn) -> Result<Option<Row>, StoreError> {
        let sql = sqlx::AssertSqlSafe(self.sql);
        Ok(match conn.target() {
            Target::Sqlite(c) => bind_all!(sqlx::query(sql), self.args).fetch_optional(c).await?.map(Row::Sqlite),
            Target::Postgres(c) => bind_all!(sqlx::query(sql), self.args).fetch_optional(c).await?.map(Row::Postgres),
        })
    }

    /// Every row.
    pub async fn fetch_all(self, conn: &mut Conn) -> Result<Vec<Row>, StoreError> {
        let sql = sqlx::AssertSqlSafe(self.sql);
        Ok(match conn.target() {
            Target::Sqlite(c) => {
                bind_all!(sqlx::query(sql), self.args).fetch_all(c).await?.into_iter().map(Row::Sqlite).collect()
            }
            Target::Postgres(c) => {
                bind_all!(sqlx::query(sql), self.args).fetch_all(c).await?.into_iter().map(Row::Postgres).collect()
            }
        })
    }

    /// Every row, each handed to `each` as it arrives, before the next is
    /// read: the caller works on a long result while the engine is still
    /// producing it (PostgreSQL sending it, SQLite's thread stepping it).
    /// Stops at the first error, `each`'s included.
    pub async fn for_each_row(
        self,
        conn: &mut Conn,
        mut each: impl FnMut(&Row) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        use futures::TryStreamExt;
        let sql = sqlx::AssertSqlSafe(self.sql);
        match conn.target() {
            Target::Sqlite(c) => {
                let mut rows = bind_all!(sqlx::query(sql), self.args).fetch(c);
                while let Some(row) = rows.try_next().await? {
                    each(&Row::Sqlite(row))?;
                }
            }
            Target::Postgres(c) => {
                let mut rows = bind_all!(sqlx::query(sql), self.args).fetch(c);
                while let Some(row) = rows.try_next().await? {
                    each(&Row::Postgres(row))?;
                }
            }
        }
        Ok(())
    }

    /// Exactly one row.
    pub async fn fetch_one(self, conn: &mut Conn) -> Result<Row, StoreError> {
        self.fetch_optional(conn).await?.ok_or(StoreError::Database(sqlx::Error::RowNotFound))
    }
}

/// A result row, read by column name.
#[derive(Debug)]
pub enum Row {
    /// From SQLite.
    Sqlite(SqliteRow),
    /// From PostgreSQL.
    Postgres(PgRow),
}

macro_rules! get {
    ($self:expr, $col:expr, $t:ty) => {
        match $self {
            Row::Sqlite(r) => sqlx::Row::try_get::<$t, _>(r, $col),
            Row::Postgres(r) => sqlx::Row::try_get::<$t, _>(r, $col),
        }
        .map_err(StoreError::from)
    };
}

impl Row {
    /// An integer column.
    pub fn int(&self, col: &str) -> Result<i64, StoreError> {
        get!(self, col, i64)
    }

    /// A nullable integer column.
    pub fn opt_int(&self, col: &str) -> Result<Option<i64>, StoreError> {
        get!(self, col, Option<i64>)
    }

    /// A text column.
    pub fn text(&self, col: &str) -> Result<String, StoreError> {
        get!(self, col, String)
    }

    /// A nullable text column.
    pub fn opt_text(&self, col: &str) -> Result<Option<String>, StoreError> {
        get!(self, col, Option<String>)
    }

    /// A bytes column (PostgreSQL `BYTEA`, SQLite `BLOB`).
    pub fn bytes(&self, col: &str) -> Result<Vec<u8>, StoreError> {
        get!(self, col, Vec<u8>)
    }

    /// A bytes column, borrowed from the row (no copy).
    pub fn byte_slice(&self, col: &str) -> Result<&[u8], StoreError> {
        get!(self, col, &[u8])
    }
}
