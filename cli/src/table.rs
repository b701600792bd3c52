//! Plain aligned tables and key/value lists for the human output.

/// A table with a header row. Columns are separated by two spaces; a column whose cells are
/// all numbers (or `-`) is right-aligned.
#[derive(Debug, Clone)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
    numbers_right: bool,
}

impl Table {
    pub fn new(headers: &[&str]) -> Self {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            numbers_right: true,
        }
    }

    /// Every column left-aligned (for tables of settings rather than counts).
    pub fn left_aligned(mut self) -> Self {
        self.numbers_right = false;
        self
    }

    /// Adds a row; missing cells are left empty, extra cells are dropped.
    pub fn row(&mut self, cells: Vec<String>) {
        let mut cells: Vec<String> = cells.into_iter().map(|c| clean(&c)).collect();
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn render(&self) -> String {
        let n = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| width(h)).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(width(cell));
            }
        }
        let right: Vec<bool> = (0..n)
            .map(|i| {
                let mut cells = self.rows.iter().map(|r| r[i].as_str());
                let mut any = false;
                let all = cells.all(|c| {
                    if c == "-" || c.is_empty() {
                        true
                    } else {
                        any = true;
                        is_number(c)
                    }
                });
                self.numbers_right && all && any
            })
            .collect();
        let mut out = String::new();
        let mut line = |cells: &[String]| {
            let mut l = String::new();
            for (i, cell) in cells.iter().enumerate() {
                if i > 0 {
                    l.push_str("  ");
                }
                let pad = widths[i] - width(cell);
                if right[i] {
                    l.extend(std::iter::repeat_n(' ', pad));
                    l.push_str(cell);
                } else {
                    l.push_str(cell);
                    l.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(l.trim_end());
            out.push('\n');
        };
        line(&self.headers);
        for row in &self.rows {
            line(row);
        }
        out
    }
}

/// Keys and values, one pair a line, values aligned.
pub fn key_values(pairs: &[(&str, String)]) -> String {
    let w = pairs.iter().map(|(k, _)| width(k)).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in pairs {
        let line = format!("{k:<w$}  {}", clean(v));
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Control characters (a newline in an error message, say) shown escaped, so that one value
/// stays on one line.
pub fn clean(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().collect()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// At most `max` characters, with `…` marking a cut.
pub fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

fn width(s: &str) -> usize {
    s.chars().count()
}

fn is_number(s: &str) -> bool {
    s.parse::<f64>().is_ok()
        || s.strip_suffix('%')
            .is_some_and(|n| n.parse::<f64>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_text_left_and_numbers_right() {
        let mut t = Table::new(&["SERVICE", "PENDING", "≤1M", "PAUSED"]);
        t.row(vec!["orders".into(), "12".into(), "-".into(), "no".into()]);
        t.row(vec![
            "payments-eu".into(),
            "3".into(),
            "7".into(),
            "yes".into(),
        ]);
        assert_eq!(
            t.render(),
            "SERVICE      PENDING  ≤1M  PAUSED\n\
             orders            12    -  no\n\
             payments-eu        3    7  yes\n"
        );
    }

    #[test]
    fn pads_short_rows_and_escapes_newlines() {
        let mut t = Table::new(&["A", "B"]);
        t.row(vec!["x\ny".into()]);
        assert_eq!(t.render(), "A     B\nx\\ny\n");
        assert!(!t.is_empty());
    }

    #[test]
    fn left_aligned_tables_do_not_move_numbers() {
        let mut t = Table::new(&["FIELD", "VALUE"]).left_aligned();
        t.row(vec!["max_attempts".into(), "3".into()]);
        t.row(vec!["jitter".into(), "0.25".into()]);
        assert_eq!(
            t.render(),
            "FIELD         VALUE\nmax_attempts  3\njitter        0.25\n"
        );
    }

    #[test]
    fn key_values_align() {
        assert_eq!(
            key_values(&[("status", "SCHEDULED".into()), ("attempt", "1".into())]),
            "status   SCHEDULED\nattempt  1\n"
        );
    }

    #[test]
    fn truncates_by_characters() {
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
        assert_eq!(truncate("ééééé", 3), "éé…");
    }
}
