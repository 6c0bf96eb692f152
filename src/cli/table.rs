//! Tables as the BOSH CLI prints them (bosh-cli `ui/table`): for a terminal, a title, a
//! header, columns padded and separated by two spaces (after the last one too), a repeated
//! first column shown as `~`, and a count (`2 instances`); for a pipe, only the data, the
//! first column on every row and each column followed by a tab (for `cut` and `grep`).
//! Either way an empty cell is `-` and a cell with line breaks spans several lines.

use std::io::IsTerminal;

/// A table of sections (an instance and its processes), sorted by its first two columns.
pub struct Table {
    /// `Deployment 'hello'`.
    pub title: String,
    /// What a row is, for the count (`instances`).
    pub content: String,
    /// Column titles (a line break makes a two-line header).
    pub header: Vec<String>,
    /// Sections: each one's rows share its first row's first column.
    pub sections: Vec<Vec<Vec<String>>>,
    /// Rows sorted by their first two columns (else in the order given).
    pub sort: bool,
}

impl Table {
    /// The table as bosh-cli prints it to a terminal (`tty`) or a pipe.
    pub fn render(&self, tty: bool) -> String {
        let count = (self.sections.iter().flatten())
            .filter(|row| !row.first().is_none_or(String::is_empty))
            .count();
        let mut rows: Vec<Vec<String>> = Vec::new();
        for section in &self.sections {
            let first = section
                .first()
                .and_then(|r| r.first())
                .cloned()
                .unwrap_or_default();
            for row in section {
                let mut row = row.clone();
                if !first.is_empty() && !row.is_empty() {
                    row[0] = first.clone();
                }
                rows.push(row);
            }
        }
        if self.sort {
            rows.sort_by(|a, b| (a.first(), a.get(1)).cmp(&(b.first(), b.get(1))));
        }
        if tty {
            let mut last: Option<String> = None;
            for row in &mut rows {
                if last.as_deref() == row.first().map(String::as_str) {
                    row[0] = "~".into();
                } else {
                    last = row.first().cloned();
                }
            }
        }
        let border = if tty { "  " } else { "\t" };
        let mut lines: Vec<Vec<String>> = Vec::new();
        if tty {
            lines.extend(spread(&self.header, ""));
        }
        for row in &rows {
            lines.extend(spread(row, "-"));
        }
        let columns = lines.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                (lines.iter())
                    .filter_map(|l| l.get(c))
                    .map(|s| s.len())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        if tty && !self.title.is_empty() {
            out.push_str(&format!("{}\n\n", self.title));
        }
        for line in &lines {
            for (c, cell) in line.iter().enumerate() {
                out.push_str(cell);
                if c + 1 < line.len() {
                    out.push_str(&" ".repeat(widths[c] - cell.len()));
                }
                out.push_str(border);
            }
            out.push('\n');
        }
        if tty && !self.content.is_empty() {
            out.push_str(&format!("\n{count} {}\n", self.content));
        }
        out
    }
}

/// One row as its printed lines: each cell's lines side by side; an empty cell is `empty`.
fn spread(row: &[String], empty: &str) -> Vec<Vec<String>> {
    let cells: Vec<Vec<&str>> = (row.iter())
        .map(|cell| match cell.as_str() {
            "" => vec![empty],
            text => text.split('\n').collect(),
        })
        .collect();
    let height = cells.iter().map(Vec::len).max().unwrap_or(1);
    (0..height)
        .map(|i| {
            (cells.iter())
                .map(|c| c.get(i).copied().unwrap_or("").to_string())
                .collect()
        })
        .collect()
}

/// Whether stdout is a terminal (bosh-cli's default for `--tty`).
pub fn stdout_is_tty() -> bool {
    std::io::stdout().is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        let row = |cells: &[&str]| cells.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Table {
            title: "Deployment 'hello'".into(),
            content: "instances".into(),
            header: vec![
                "Instance".into(),
                "Process".into(),
                "Process State".into(),
                "IPs".into(),
            ],
            sections: vec![
                vec![row(&["web/b", "", "running", "10.0.0.2"])],
                vec![
                    row(&["web/a", "", "failing", "10.0.0.1\n10.1.0.1"]),
                    row(&["", "server", "failing", ""]),
                    row(&["", "helper", "running", ""]),
                ],
            ],
            sort: true,
        }
    }

    #[test]
    fn a_terminal_gets_title_header_tildes_and_count() {
        let expected = [
            "Deployment 'hello'",
            "",
            "Instance  Process  Process State  IPs  ",
            "web/a     -        failing        10.0.0.1  ",
            &format!("{}10.1.0.1  ", " ".repeat(34)),
            "~         helper   running        -  ",
            "~         server   failing        -  ",
            "web/b     -        running        10.0.0.2  ",
            "",
            "2 instances",
            "",
        ];
        assert_eq!(table().render(true), expected.join("\n"));
    }

    #[test]
    fn a_pipe_gets_tab_separated_data() {
        assert_eq!(
            table().render(false),
            "web/a\t-     \tfailing\t10.0.0.1\t\n\
             \x20    \t      \t       \t10.1.0.1\t\n\
             web/a\thelper\trunning\t-\t\n\
             web/a\tserver\tfailing\t-\t\n\
             web/b\t-     \trunning\t10.0.0.2\t\n"
        );
    }
}
