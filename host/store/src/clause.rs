//! WHERE clauses built from filters: conditions with bound values, never interpolated ones.

/// A WHERE clause (starting ` WHERE 1 = 1`, so every condition is an `AND`) and the values
/// to bind to its placeholders, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Where {
    /// The clause.
    pub sql: String,
    /// Its values.
    pub binds: Vec<String>,
}

impl Where {
    /// The clause that holds for every row.
    pub fn new() -> Self {
        Self {
            sql: " WHERE 1 = 1".to_owned(),
            binds: Vec::new(),
        }
    }

    /// Adds `AND condition`, each `$?` in it bound to `value`.
    pub fn push(&mut self, condition: &str, value: String) {
        self.binds.push(value);
        let placeholder = format!("${}", self.binds.len());
        self.sql.push_str(" AND ");
        self.sql.push_str(&condition.replace("$?", &placeholder));
    }

    /// Adds `AND (condition OR condition …)`, the `$?` of each bound to one of `values`.
    pub fn push_any(&mut self, condition: &str, values: impl IntoIterator<Item = String>) {
        let mut any = Vec::new();
        for v in values {
            self.binds.push(v);
            any.push(condition.replace("$?", &format!("${}", self.binds.len())));
        }
        self.sql.push_str(&format!(" AND ({})", any.join(" OR ")));
    }

    /// Adds `AND condition`, which binds nothing.
    pub fn push_fixed(&mut self, condition: &str) {
        self.sql.push_str(" AND ");
        self.sql.push_str(condition);
    }

    /// Adds `AND column IN (…values)`.
    pub fn push_in(&mut self, column: &str, values: &[String]) {
        let mut list = Vec::with_capacity(values.len());
        for v in values {
            self.binds.push(v.clone());
            list.push(format!("${}", self.binds.len()));
        }
        self.sql
            .push_str(&format!(" AND {column} IN ({})", list.join(", ")));
    }
}

/// `sql` with `binds` bound in order.
pub(crate) fn bound<'q>(sql: &'q str, binds: &'q [String]) -> crate::AnyQuery<'q> {
    let mut query = sqlx::query(sql);
    for b in binds {
        query = query.bind(b.as_str());
    }
    query
}

/// `text` as a LIKE pattern that matches only itself: `%`, `_` and `\` escaped, for a
/// condition written with `ESCAPE '\'`.
pub(crate) fn like_literal(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_literals_match_only_themselves() {
        assert_eq!(like_literal("a%b_c\\"), "a\\%b\\_c\\\\");
    }

    #[test]
    fn conditions_are_numbered_in_bind_order() {
        let mut w = Where::new();
        w.push("a = $?", "x".into());
        w.push_fixed("b IS NULL");
        w.push("(c LIKE $? OR d LIKE $?)", "y".into());
        w.push_in("e", &["1".into(), "2".into()]);
        w.push_any("f = $?", ["p".to_owned(), "q".to_owned()]);
        assert_eq!(
            w.sql,
            " WHERE 1 = 1 AND a = $1 AND b IS NULL AND (c LIKE $2 OR d LIKE $2) AND e IN ($3, $4) \
             AND (f = $5 OR f = $6)"
        );
        assert_eq!(w.binds, ["x", "y", "1", "2", "p", "q"]);
    }
}
