//! The soak's samples: every node's RSS and open files (from /proc), its live tasks,
//! subscribers, the pending gauge and the lateness histogram (from its /metrics), and
//! Cassandra's live SSTables of the keyspace and the tombstone warnings of its log. One row
//! per sample, appended to `samples.csv` as it is taken.

use std::{
    io::{Read, Seek, SeekFrom, Write},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use tokio::sync::Mutex as AsyncMutex;

use super::judge::{self, Hist};
use crate::chaos::{cluster::Node, history::now_ms};

/// One node in one sample; None where it could not be read (the node was down, stopped or
/// being restarted by a fault).
#[derive(Clone, Debug, Default)]
pub struct NodeSample {
    pub pid: Option<u32>,
    pub rss_mb: Option<f64>,
    pub fds: Option<u64>,
    /// Its threads (`/proc/<pid>/status`), for reading RSS steps: a thread's first
    /// allocations give it heap pages of its own.
    pub threads: Option<u64>,
    pub tasks: Option<i64>,
    pub subscribers: Option<i64>,
}

#[derive(Clone, Debug)]
pub struct Row {
    /// Seconds from the start of the workload.
    pub t_s: f64,
    /// `load`, `drain`, `after-load` (the churn stopped), `end` (every executor gone).
    pub phase: &'static str,
    /// Seconds since the previous sample (the interval the lateness covers).
    pub interval_s: f64,
    pub nodes: Vec<NodeSample>,
    pub subscribers: Option<i64>,
    /// `rebound_pending` summed over services and bands, from the compactor node.
    pub pending: Option<i64>,
    /// The node that holds the compactor role (1-based), as its `rebound_compactor` says.
    pub compactor: Option<usize>,
    /// Deliveries in the interval, and their lateness p99.
    pub deliveries: u64,
    pub lateness_p99_s: Option<f64>,
    pub sstables: Option<u64>,
    /// Tombstone warnings naming the keyspace since the start (cumulative).
    pub tombstone_warnings: u64,
}

/// Cassandra's files as `scripts/cassandra` lays them out: each configured node's
/// `logs/system.log` (read from where it stood at the start) and `data/<keyspace>/`.
pub struct CassandraFiles {
    keyspace: String,
    logs: Vec<(PathBuf, u64)>,
    data: Vec<PathBuf>,
    /// Tombstone warnings since the start naming the keyspace, and others.
    pub ours: u64,
    pub others: u64,
    /// The first few warnings naming the keyspace.
    pub examples: Vec<String>,
}

impl CassandraFiles {
    /// The log and data directory of every node `scripts/cassandra log N` names that exists.
    pub fn locate(repo: &Path, keyspace: &str) -> CassandraFiles {
        let mut logs = Vec::new();
        let mut data = Vec::new();
        for n in 1..=3 {
            let out = std::process::Command::new(repo.join("scripts/cassandra"))
                .args(["log", &n.to_string()])
                .output();
            let Ok(out) = out else { continue };
            let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            if let Some(node_dir) = path.parent().and_then(Path::parent) {
                data.push(node_dir.join("data").join(keyspace));
            }
            logs.push((path, meta.len()));
        }
        CassandraFiles {
            keyspace: keyspace.to_string(),
            logs,
            data,
            ours: 0,
            others: 0,
            examples: Vec::new(),
        }
    }

    pub fn log_paths(&self) -> Vec<&Path> {
        self.logs.iter().map(|(p, _)| p.as_path()).collect()
    }

    /// SSTables of the keyspace on disk: `*-Data.db` in its table directories (snapshots
    /// and backups left out). None when no node's data directory is known.
    pub fn sstables(&self) -> Option<u64> {
        if self.data.is_empty() {
            return None;
        }
        let mut n = 0;
        for ks in &self.data {
            let Ok(tables) = std::fs::read_dir(ks) else {
                continue;
            };
            for t in tables.flatten() {
                let Ok(files) = std::fs::read_dir(t.path()) else {
                    continue;
                };
                n += files
                    .flatten()
                    .filter(|f| f.file_name().to_string_lossy().ends_with("-Data.db"))
                    .count() as u64;
            }
        }
        Some(n)
    }

    /// Per table: the SSTables of the keyspace now, for the summary.
    pub fn sstables_by_table(&self) -> Vec<(String, u64)> {
        let mut out: std::collections::BTreeMap<String, u64> = Default::default();
        for ks in &self.data {
            let Ok(tables) = std::fs::read_dir(ks) else {
                continue;
            };
            for t in tables.flatten() {
                let name = t.file_name().to_string_lossy().to_string();
                let table = name
                    .rsplit_once('-')
                    .map_or(name.clone(), |(a, _)| a.into());
                let n = std::fs::read_dir(t.path()).map_or(0, |files| {
                    files
                        .flatten()
                        .filter(|f| f.file_name().to_string_lossy().ends_with("-Data.db"))
                        .count() as u64
                });
                *out.entry(table).or_default() += n;
            }
        }
        out.into_iter().collect()
    }

    /// Reads what the logs gained since the last call and counts the tombstone warnings.
    pub fn scan_logs(&mut self) {
        for (path, offset) in &mut self.logs {
            let Ok(mut f) = std::fs::File::open(&*path) else {
                continue;
            };
            let len = f.metadata().map_or(0, |m| m.len());
            if len < *offset {
                // The log was replaced (a fresh Cassandra): read it from the start.
                *offset = 0;
            }
            if f.seek(SeekFrom::Start(*offset)).is_err() {
                continue;
            }
            let mut buf = Vec::new();
            if f.read_to_end(&mut buf).is_err() {
                continue;
            }
            // Whole lines only: a line being written is read next time.
            let Some(end) = buf.iter().rposition(|&b| b == b'\n') else {
                continue;
            };
            *offset += end as u64 + 1;
            for line in String::from_utf8_lossy(&buf[..end]).lines() {
                if !judge::is_tombstone_warning(line) {
                    continue;
                }
                if line.contains(&self.keyspace) {
                    self.ours += 1;
                    if self.examples.len() < 5 {
                        self.examples.push(line.chars().take(400).collect());
                    }
                } else {
                    self.others += 1;
                }
            }
        }
    }
}

/// What one scrape of a node's /metrics gave.
#[derive(Default)]
struct Scrape {
    tasks: i64,
    subscribers: i64,
    compactor: bool,
    pending: i64,
    lateness: Hist,
}

fn parse_metrics(body: &str) -> Option<Scrape> {
    use prometheus_parse::Value;
    let s = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).ok()?;
    let mut out = Scrape::default();
    for m in &s.samples {
        let v = match &m.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(h) => {
                if m.metric == "rebound_delivery_lateness_seconds" {
                    let mut b: Hist = h.iter().map(|c| (c.less_than, c.count)).collect();
                    b.sort_by(|x, y| x.0.total_cmp(&y.0));
                    out.lateness = b;
                }
                continue;
            }
            Value::Summary(_) => continue,
        };
        match m.metric.as_str() {
            "rebound_tasks" => out.tasks += v as i64,
            "rebound_subscribers" => out.subscribers += v as i64,
            "rebound_compactor" => out.compactor = v > 0.0,
            "rebound_pending" => out.pending += v as i64,
            _ => {}
        }
    }
    Some(out)
}

/// A number field of `/proc/<pid>/status` (`VmRSS` in kB, `Threads`).
fn status_field(status: &str, field: &str) -> Option<f64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn open_fds(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

/// Takes the samples of a run.
pub struct Sampler {
    t0: i64,
    nodes: Vec<Arc<AsyncMutex<Node>>>,
    http_ports: Vec<Option<u16>>,
    pub cassandra: CassandraFiles,
    /// Each node's last lateness histogram, with the process it came from.
    last_hist: Vec<Option<(u32, Hist)>>,
    last_t_s: f64,
    csv: Option<std::fs::File>,
    pub rows: Vec<Row>,
}

impl Sampler {
    pub fn new(
        t0: i64,
        nodes: Vec<Arc<AsyncMutex<Node>>>,
        http_ports: Vec<Option<u16>>,
        cassandra: CassandraFiles,
        csv_path: &Path,
    ) -> std::io::Result<Sampler> {
        let mut csv = std::fs::File::create(csv_path)?;
        let mut head = String::from("t_s,phase");
        for i in 1..=nodes.len() {
            for c in ["pid", "rss_mb", "fds", "threads", "tasks", "subscribers"] {
                head.push_str(&format!(",n{i}_{c}"));
            }
        }
        head.push_str(
            ",subscribers,pending,compactor,deliveries,lateness_p99_s,sstables,tombstone_warnings\n",
        );
        csv.write_all(head.as_bytes())?;
        Ok(Sampler {
            t0,
            last_hist: vec![None; nodes.len()],
            nodes,
            http_ports,
            cassandra,
            last_t_s: 0.0,
            csv: Some(csv),
            rows: Vec::new(),
        })
    }

    /// Takes one sample now and appends it.
    pub async fn sample(&mut self, phase: &'static str) -> &Row {
        let t_s = (now_ms() - self.t0) as f64 / 1000.0;
        let mut nodes = Vec::new();
        let mut interval = Hist::new();
        let (mut subscribers, mut pending, mut compactor) = (None::<i64>, None, None);
        for (i, node) in self.nodes.iter().enumerate() {
            let mut s = NodeSample::default();
            // A node held by the fault injector is down, stopped or restarting: not read.
            let pid = node.try_lock().ok().and_then(|n| n.pid());
            let Some(pid) = pid else {
                nodes.push(s);
                continue;
            };
            s.pid = Some(pid);
            // /proc first: the scrape's own connection is not counted.
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            s.rss_mb = status_field(&status, "VmRSS").map(|kb| kb / 1024.0);
            s.threads = status_field(&status, "Threads").map(|n| n as u64);
            s.fds = open_fds(pid);
            if let Some(port) = self.http_ports[i] {
                let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
                let got = tokio::time::timeout(
                    Duration::from_secs(3),
                    rebound_integration_tests::http_get(addr, "/metrics"),
                )
                .await;
                if let Some(m) = got
                    .ok()
                    .and_then(Result::ok)
                    .filter(|(code, _)| *code == 200)
                    .and_then(|(_, body)| parse_metrics(&body))
                {
                    s.tasks = Some(m.tasks);
                    s.subscribers = Some(m.subscribers);
                    *subscribers.get_or_insert(0) += m.subscribers;
                    if m.compactor {
                        pending = Some(m.pending);
                        compactor = Some(i + 1);
                    }
                    let prev = self.last_hist[i]
                        .as_ref()
                        .filter(|(p, _)| *p == pid)
                        .map(|(_, h)| h);
                    judge::add(&mut interval, &judge::delta(prev, &m.lateness));
                    self.last_hist[i] = Some((pid, m.lateness));
                }
            }
            nodes.push(s);
        }
        self.cassandra.scan_logs();
        let row = Row {
            t_s,
            phase,
            interval_s: t_s - self.last_t_s,
            nodes,
            subscribers,
            pending,
            compactor,
            deliveries: judge::count(&interval) as u64,
            lateness_p99_s: judge::quantile(0.99, &interval),
            sstables: self.cassandra.sstables(),
            tombstone_warnings: self.cassandra.ours,
        };
        self.last_t_s = t_s;
        if let Some(f) = self.csv.as_mut() {
            let _ = f.write_all(csv_line(&row).as_bytes());
            let _ = f.flush();
        }
        self.rows.push(row);
        self.rows.last().expect("just pushed")
    }
}

fn csv_line(r: &Row) -> String {
    fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
        v.map_or(String::new(), |v| v.to_string())
    }
    let mut line = format!("{:.1},{}", r.t_s, r.phase);
    for n in &r.nodes {
        line.push_str(&format!(
            ",{},{},{},{},{},{}",
            opt(n.pid),
            opt(n.rss_mb.map(|v| format!("{v:.1}"))),
            opt(n.fds),
            opt(n.threads),
            opt(n.tasks),
            opt(n.subscribers)
        ));
    }
    line.push_str(&format!(
        ",{},{},{},{},{},{},{}\n",
        opt(r.subscribers),
        opt(r.pending),
        opt(r.compactor),
        r.deliveries,
        opt(r.lateness_p99_s.map(|v| format!("{v:.3}"))),
        opt(r.sstables),
        r.tombstone_warnings
    ));
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_gives_the_sums_and_the_lateness_histogram() {
        let body = "\
# HELP rebound_tasks Tasks.
# TYPE rebound_tasks gauge
rebound_tasks{owner=\"engine\"} 5
rebound_tasks{owner=\"dispatcher\"} 7
# TYPE rebound_subscribers gauge
rebound_subscribers{service=\"pay\"} 2
rebound_subscribers{service=\"mail\"} 1
# TYPE rebound_compactor gauge
rebound_compactor 1
# TYPE rebound_pending gauge
rebound_pending{service=\"pay\",band=\"overdue\"} 3
rebound_pending{service=\"pay\",band=\"within_minute\"} 4
# TYPE rebound_delivery_lateness_seconds histogram
rebound_delivery_lateness_seconds_sum 12.5
rebound_delivery_lateness_seconds_count 20
rebound_delivery_lateness_seconds_bucket{le=\"0.5\"} 10
rebound_delivery_lateness_seconds_bucket{le=\"1.0\"} 19
rebound_delivery_lateness_seconds_bucket{le=\"+Inf\"} 20
";
        let s = parse_metrics(body).expect("parses");
        assert_eq!((s.tasks, s.subscribers, s.pending), (12, 3, 7));
        assert!(s.compactor);
        assert_eq!(
            s.lateness,
            vec![(0.5, 10.0), (1.0, 19.0), (f64::INFINITY, 20.0)]
        );
    }

    #[test]
    fn status_fields_are_read_by_name() {
        let status = "Name:\trebound-server\nVmRSS:\t   42240 kB\nThreads:\t9\n";
        assert_eq!(status_field(status, "VmRSS"), Some(42_240.0));
        assert_eq!(status_field(status, "Threads"), Some(9.0));
        assert_eq!(status_field(status, "VmSwap"), None);
    }

    #[test]
    fn a_row_is_one_csv_line_with_empty_cells_for_what_was_not_read() {
        let r = Row {
            t_s: 10.04,
            phase: "load",
            interval_s: 10.0,
            nodes: vec![
                NodeSample {
                    pid: Some(7),
                    rss_mb: Some(41.25),
                    fds: Some(30),
                    threads: Some(7),
                    tasks: Some(12),
                    subscribers: Some(2),
                },
                NodeSample::default(),
            ],
            subscribers: Some(2),
            pending: None,
            compactor: Some(1),
            deliveries: 40,
            lateness_p99_s: Some(0.61),
            sstables: Some(9),
            tombstone_warnings: 0,
        };
        assert_eq!(
            csv_line(&r),
            "10.0,load,7,41.2,30,7,12,2,,,,,,,2,,1,40,0.610,9,0\n"
        );
    }
}
