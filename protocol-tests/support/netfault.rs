//! Network faults between real processes, made by the test itself: each *host* is a
//! Linux network namespace with one interface (`eth0`, a veth) on a bridge in a *hub*
//! namespace, addressed `10.77.0.N/24`. Those addresses exist only inside the test's
//! own namespaces: nothing is added to the machine's own network namespace, and no
//! packet leaves the hub. Processes run in a host with `ip netns exec` (which execs the
//! program, so its pid is the program's); the test's own sockets are opened from inside
//! a host ([`Net::connect`]: a thread that enters the namespace, connects, and hands
//! the socket back; a socket keeps the namespace it was made in).
//!
//! Faults ([`Fault`], removed when dropped) are nftables tables in a host's namespace
//! — dropped packets, a black hole, not a refusal — and, for a slow link, a `tbf`
//! qdisc on a host's interface. This machine's kernel has no `netem` qdisc (`tc qdisc
//! add ... netem` answers "Specified qdisc kind is unknown"), so loss is nftables'
//! `numgen random` and delay is a rate limit's queue (plus the TCP retransmissions that
//! loss causes). A new fault is one function that writes an nftables table: see
//! [`Net::cut`], [`Net::cut_one_way`], [`Net::isolate`], [`Net::lossy`].
//!
//! Needs root, `ip` (iproute2) and `nft` (nftables). [`Net::new`] answers `None` (after
//! a notice) where they are missing, and fails instead under
//! `REDSTALK_REQUIRE_ORACLE=1`.
//!
//! Clean-up: dropping a [`Net`] kills whatever still runs in its namespaces and deletes
//! them (their veths, rules and qdiscs go with them). Namespaces are named
//! `rsnet-<pid>-<n>-<host>`; [`Net::new`] first deletes those of processes that no
//! longer run (a test killed before its clean-up).

use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Log, spawn_logged};

const PREFIX: &str = "rsnet-";

/// One run's hosts and hub; see the module header.
pub struct Net {
    /// `rsnet-<pid>-<n>`: every namespace of this net starts with it.
    tag: String,
    hub: String,
    hosts: Vec<(String, Ipv4Addr)>,
}

/// Run `ip` (or any command) and fail with its stderr when it fails.
fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    run(Command::new("ip").args(args))
}

/// Whether this process may make namespaces and rules (root, with `ip` and `nft`).
fn available() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    #[allow(unsafe_code)]
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err("not root".into());
    }
    for tool in ["ip", "nft"] {
        let runs = Command::new(tool)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !runs {
            return Err(format!("{tool} is not installed"));
        }
    }
    Ok(())
}

/// Delete the namespaces of nets whose process no longer runs.
fn sweep_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or("");
        if !pid.is_empty() && !Path::new("/proc").join(pid).exists() {
            kill_all_in(name);
            let _ = ip(&["netns", "del", name]);
        }
    }
}

/// SIGKILL every process in namespace `ns`.
fn kill_all_in(ns: &str) {
    let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() else {
        return;
    };
    for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        let _ = Command::new("kill").args(["-KILL", pid]).status();
    }
}

impl Net {
    /// A hub and one host per name (addresses `10.77.0.1`, `.2`, … in order), or `None`
    /// after a notice where namespaces cannot be made (see the module header).
    pub fn new(hosts: &[&str]) -> Option<Net> {
        if let Err(why) = available() {
            assert!(
                !super::oracle_required(),
                "network fault tests need root, ip and nft (REDSTALK_REQUIRE_ORACLE=1): {why}"
            );
            eprintln!("!!! network fault tests SKIPPED: {why}");
            return None;
        }
        sweep_stale();
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let tag = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut net = Net {
            hub: format!("{tag}-hub"),
            tag,
            hosts: Vec::new(),
        };
        net.build(hosts)
            .unwrap_or_else(|e| panic!("build the test network: {e}"));
        Some(net)
    }

    fn build(&mut self, hosts: &[&str]) -> Result<(), String> {
        ip(&["netns", "add", &self.hub])?;
        ip(&["-n", &self.hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &self.hub, "link", "set", "br0", "up"])?;
        for (i, name) in hosts.iter().enumerate() {
            let ns = format!("{}-{name}", self.tag);
            let addr = Ipv4Addr::new(10, 77, 0, i as u8 + 1);
            // Pushed first, so a failure below still deletes what was made.
            self.hosts.push((name.to_string(), addr));
            ip(&["netns", "add", &ns])?;
            let port = format!("p{}", i + 1);
            ip(&[
                "link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", &port,
                "netns", &self.hub,
            ])?;
            ip(&["-n", &self.hub, "link", "set", &port, "master", "br0", "up"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// The namespace of host `name`.
    pub fn ns(&self, name: &str) -> String {
        assert!(
            self.hosts.iter().any(|(h, _)| h == name),
            "no host {name} in this net"
        );
        format!("{}-{name}", self.tag)
    }

    /// The address of host `name`.
    pub fn ip(&self, name: &str) -> Ipv4Addr {
        self.hosts
            .iter()
            .find(|(h, _)| h == name)
            .map(|(_, a)| *a)
            .unwrap_or_else(|| panic!("no host {name} in this net"))
    }

    /// `host`'s address with `port`.
    pub fn addr(&self, host: &str, port: u16) -> SocketAddr {
        SocketAddr::from((self.ip(host), port))
    }

    /// A command that runs `program` in host `name`.
    pub fn command(&self, name: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns(name)]).arg(program);
        cmd
    }

    /// Run `program args` in host `name`, its stderr kept in a [`Log`]; killed when the
    /// returned process is dropped.
    pub fn spawn(
        &self,
        name: &str,
        program: impl AsRef<std::ffi::OsStr>,
        args: &[String],
    ) -> NetProc {
        let (child, log) = spawn_logged(self.command(name, program).args(args))
            .unwrap_or_else(|e| panic!("spawn in host {name}: {e}"));
        NetProc { child, log }
    }

    /// A TCP connection to `to` opened from inside host `from` (within `timeout`).
    pub fn connect(&self, from: &str, to: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        connect_in(&format!("/run/netns/{}", self.ns(from)), to, timeout)
    }

    /// A function that connects from host `from` to `to` (for a client that
    /// reconnects by itself).
    pub fn connector(&self, from: &str, to: SocketAddr) -> super::workload::Connect {
        let path = format!("/run/netns/{}", self.ns(from));
        Arc::new(move || connect_in(&path, to, Duration::from_secs(2)))
    }

    /// Wait until something listens on `to` (connecting from its own host); panics
    /// after `within`, showing `log`.
    pub fn wait_listening(&self, host: &str, to: SocketAddr, within: Duration, log: &Log) {
        let start = Instant::now();
        while self.connect(host, to, Duration::from_millis(500)).is_err() {
            assert!(
                start.elapsed() < within,
                "nothing listens on {to} in host {host} within {within:?}\n{}",
                log.tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Install the chains `chains` (nftables, family inet) in host `name`, as a table
    /// of their own: the fault `what`.
    fn nft(&self, name: &str, what: String, chains: &str) -> Fault {
        install(&self.ns(name), what, chains)
    }

    /// Packets between hosts `a` and `b` are dropped, both ways.
    pub fn cut(&self, a: &str, b: &str) -> Fault {
        cut_in(&self.ns(a), self.ip(b), format!("{a} cut from {b}"))
    }

    /// Packets from host `from` to host `to` are dropped; the other way passes.
    pub fn cut_one_way(&self, from: &str, to: &str) -> Fault {
        let peer = self.ip(to);
        self.nft(
            from,
            format!("{from} -> {to} cut (one way)"),
            &format!("chain out {{ type filter hook output priority -10; ip daddr {peer} drop; }}"),
        )
    }

    /// Host `a` reaches no other host, nor any host it.
    pub fn isolate(&self, a: &str) -> Fault {
        self.nft(
            a,
            format!("{a} isolated"),
            "chain in { type filter hook input priority -10; iifname \"eth0\" drop; }\n\
             chain out { type filter hook output priority -10; oifname \"eth0\" drop; }",
        )
    }

    /// `percent` of the packets host `a` sends or receives are dropped, at random.
    pub fn lossy(&self, a: &str, percent: u32) -> Fault {
        self.nft(
            a,
            format!("{a} loses {percent}% of its packets"),
            &format!(
                "chain in {{ type filter hook input priority -10; iifname \"eth0\" numgen random mod 100 < {percent} drop; }}\n\
                 chain out {{ type filter hook output priority -10; oifname \"eth0\" numgen random mod 100 < {percent} drop; }}"
            ),
        )
    }

    /// Host `a` sends at most `kbit` kbit/s, queueing up to `latency` (tbf): a slow link
    /// whose delay grows with what it carries.
    pub fn slow(&self, a: &str, kbit: u32, latency: Duration) -> Fault {
        let ns = self.ns(a);
        let rate = format!("{kbit}kbit");
        let lat = format!("{}ms", latency.as_millis());
        run(Command::new("tc").args([
            "-n", &ns, "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", &rate, "burst", "8kb",
            "latency", &lat,
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        Fault {
            what: format!("{a} sends at {kbit} kbit/s"),
            undo: vec![
                ["tc", "-n", &ns, "qdisc", "del", "dev", "eth0", "root"]
                    .map(String::from)
                    .to_vec(),
            ],
        }
    }

    /// Cut `a` from `b` and heal it, again and again, until the returned [`Flap`] is
    /// dropped: each cut and each healed spell lasts a random time in `spell`.
    pub fn flap(&self, a: &str, b: &str, spell: (Duration, Duration), seed: u64) -> Flap {
        let (ns, peer, what) = (self.ns(a), self.ip(b), format!("{a} cut from {b}"));
        let stop = Arc::new(AtomicBool::new(false));
        let cuts = Arc::new(AtomicU64::new(0));
        let (stop2, cuts2) = (stop.clone(), cuts.clone());
        let thread = std::thread::spawn(move || {
            let mut rng = super::rng::Rng::new(seed);
            let (lo, hi) = (spell.0.as_millis() as u64, spell.1.as_millis() as u64);
            let mut spell_len = || Duration::from_millis(rng.range(lo, hi.max(lo + 1)));
            while !stop2.load(Ordering::SeqCst) {
                let fault = cut_in(&ns, peer, what.clone());
                cuts2.fetch_add(1, Ordering::Relaxed);
                sleep_unless(&stop2, spell_len());
                drop(fault);
                sleep_unless(&stop2, spell_len());
            }
        });
        Flap {
            stop,
            cuts,
            thread: Some(thread),
        }
    }
}

/// Cut the host of namespace `ns` from address `peer`, both ways.
fn cut_in(ns: &str, peer: Ipv4Addr, what: String) -> Fault {
    install(
        ns,
        what,
        &format!(
            "chain in {{ type filter hook input priority -10; ip saddr {peer} drop; }}\n\
             chain out {{ type filter hook output priority -10; ip daddr {peer} drop; }}"
        ),
    )
}

/// Install `chains` as an nftables table of their own in namespace `ns`.
fn install(ns: &str, what: String, chains: &str) -> Fault {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let table = format!("fault{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let text = format!("table inet {table} {{\n{chains}\n}}\n");
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run nft");
    child
        .stdin
        .take()
        .expect("nft's stdin")
        .write_all(text.as_bytes())
        .expect("write the nft table");
    let out = child.wait_with_output().expect("nft");
    assert!(
        out.status.success(),
        "nft -f in {ns}: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    Fault {
        what,
        undo: vec![
            [
                "ip", "netns", "exec", ns, "nft", "delete", "table", "inet", &table,
            ]
            .map(String::from)
            .to_vec(),
        ],
    }
}

fn sleep_unless(stop: &AtomicBool, d: Duration) {
    let until = Instant::now() + d;
    while !stop.load(Ordering::SeqCst) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Connect to `to` from inside the network namespace at `ns_path`, on a thread of its
/// own (entering a namespace changes only the calling thread's).
fn connect_in(ns_path: &str, to: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let path = ns_path.to_string();
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        let ns = std::fs::File::open(&path)?;
        // SAFETY: setns on a namespace file descriptor we own; it changes only this
        // thread's network namespace, and the thread ends after this connect.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        TcpStream::connect_timeout(&to, timeout)
    })
    .join()
    .unwrap_or_else(|_| Err(io::Error::other("the connecting thread panicked")))
}

impl Drop for Net {
    fn drop(&mut self) {
        let mut names: Vec<String> = self.hosts.iter().map(|(h, _)| self.ns(h)).collect();
        names.push(self.hub.clone());
        for ns in &names {
            kill_all_in(ns);
        }
        for ns in &names {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// A fault in force; dropping it (or [`Fault::heal`]) removes it.
pub struct Fault {
    pub what: String,
    undo: Vec<Vec<String>>,
}

impl Fault {
    pub fn heal(self) {}
}

impl Drop for Fault {
    fn drop(&mut self) {
        for argv in &self.undo {
            if let Err(e) = run(Command::new(&argv[0]).args(&argv[1..])) {
                // The namespace may be gone already (the net was dropped first).
                eprintln!("removing fault {:?}: {e}", self.what);
            }
        }
    }
}

/// A link cut and healed again and again ([`Net::flap`]); dropping it stops the
/// flapping, healed.
pub struct Flap {
    stop: Arc<AtomicBool>,
    cuts: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Flap {
    /// How many times the link was cut so far.
    pub fn cuts(&self) -> u64 {
        self.cuts.load(Ordering::Relaxed)
    }
}

impl Drop for Flap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A process in a host; killed (SIGKILL) when dropped.
pub struct NetProc {
    pub child: Child,
    pub log: Log,
}

impl NetProc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, sig: &str) {
        super::signal_pid(self.pid(), sig);
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for NetProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
