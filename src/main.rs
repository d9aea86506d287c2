//! The `redlock-proxy` binary: parse flags, load the configuration, start logging, serve.

use std::path::PathBuf;

use clap::Parser;
use redlock_proxy::config::{Config, ConfigError};

// Every lock operation allocates a few small, short-lived buffers; mimalloc serves those
// several times cheaper than the system allocator (measured with callgrind, see README).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A Redis-protocol proxy that turns lock commands into Redlock quorum operations.
#[derive(Parser, Debug)]
#[command(version, about, args_override_self = true)]
struct Cli {
    /// TOML configuration file (see configs/redlock-proxy.toml).
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// Address to listen on, HOST:PORT.
    #[arg(long)]
    listen: Option<String>,
    /// Comma-separated members, HOST:PORT,HOST:PORT,... A Sentinel member's URL keeps its own
    /// commas up to its #master-name (redis-sentinel://S1:26379,S2:26379#NAME,HOST:PORT); use `;`
    /// between members when one lists several hosts (redis-cluster://HOST:PORT,HOST:PORT;HOST:PORT).
    #[arg(long)]
    backends: Option<String>,
    /// Per-master reply timeout in milliseconds.
    #[arg(long)]
    node_timeout_ms: Option<u64>,
    /// Largest lock TTL accepted, in milliseconds.
    #[arg(long)]
    max_ttl_ms: Option<u64>,
    /// Any other setting, as KEY=VALUE with the value written as in the TOML file. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Start N local redis-server masters (no persistence) and use them; they stop on exit.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "3")]
    dev: Option<usize>,
    /// Check a configuration file (and the password and certificate files it names), then exit:
    /// 0 when it is valid, 2 with the reason.
    #[arg(long, value_name = "FILE")]
    check_config: Option<PathBuf>,
}

fn build_config(cli: &Cli) -> Result<Config, ConfigError> {
    let mut config = match &cli.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    if let Some(l) = &cli.listen {
        config.listen = l.clone();
    }
    if let Some(b) = &cli.backends {
        config.backends = Config::split_backends(b);
    }
    if let Some(t) = cli.node_timeout_ms {
        config.node_timeout_ms = t;
    }
    if let Some(t) = cli.max_ttl_ms {
        config.max_ttl_ms = t;
    }
    for s in &cli.set {
        config.set(s)?;
    }
    Ok(config)
}

fn main() {
    let cli = Cli::parse();
    if let Some(path) = &cli.check_config {
        match redlock_proxy::bootstrap::check_file(path) {
            Ok(_) => println!("redlock-proxy: {}: configuration OK", path.display()),
            Err(e) => {
                eprintln!("redlock-proxy: {e}");
                std::process::exit(2);
            }
        }
        return;
    }
    // The configuration is read once; a mistake in it is reported by `run`, after logging
    // starts (with the default format, since the file's own could not be read).
    let config = build_config(&cli);
    let workers = config.as_ref().map_or(1, Config::workers);
    let mut runtime = if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers);
        b
    };
    let code = match runtime.enable_all().build() {
        // Every exit path returns from `run`, so what it started (dev masters) is stopped by
        // its destructors before the process exits.
        Ok(rt) => rt.block_on(run(cli, config)),
        Err(e) => {
            eprintln!("redlock-proxy: cannot start the runtime: {e}");
            1
        }
    };
    std::process::exit(code);
}

/// Runs the proxy; returns the exit code (2 for a configuration problem, 1 for a failure).
async fn run(cli: Cli, config: Result<Config, ConfigError>) -> i32 {
    redlock_proxy::logging::init(config.as_ref().map(|c| c.log_format).unwrap_or_default());
    let mut config = match config {
        Ok(c) => c,
        Err(e) => {
            eprintln!("redlock-proxy: {e}");
            return 2;
        }
    };
    let dev = cli.dev.is_some_and(|n| n > 0);
    // A configuration mistake is reported before anything else, even when the port is taken
    // (dev mode fills in the masters first, and is checked once it has).
    if !dev && let Err(e) = config.validate() {
        eprintln!("redlock-proxy: {e}");
        return 2;
    }
    raise_open_files_limit(config.max_clients);
    // Listen first: a port that is taken is reported before anything is started. `listen = ""`
    // switches the plaintext listener off (TLS only).
    let listener = if config.listen.is_empty() {
        None
    } else {
        match tokio::net::TcpListener::bind(&config.listen).await {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("redlock-proxy: cannot listen on {}: {e}", config.listen);
                return 2;
            }
        }
    };
    let _dev = match cli.dev {
        Some(n) if n > 0 => match redlock_proxy::dev::start(n).await {
            Ok(masters) => {
                tracing::info!(masters = ?masters.addrs, "dev mode: started local redis-server masters");
                config.backends = masters.addrs.clone();
                // They start empty and only this proxy knows them: nothing to quarantine.
                config.masters_started_here = true;
                Some(masters)
            }
            Err(e) => {
                eprintln!("redlock-proxy: {e:#}");
                return 2;
            }
        },
        _ => None,
    };
    // The files the configuration names are read here, once.
    let mut parts = match redlock_proxy::bootstrap::build(&config) {
        Ok(parts) => parts,
        Err(e) => {
            eprintln!("redlock-proxy: {e}");
            return 2;
        }
    };
    // SIGHUP re-reads the member list from the file, unless the masters came from elsewhere.
    if cli.backends.is_none() && !dev {
        parts.source = cli.config.clone();
    }
    // On SIGTERM/SIGINT the server stops accepting, finishes what is in flight (within
    // shutdown_timeout_ms) and returns here, so destructors run before the process exits.
    if let Err(e) =
        redlock_proxy::server::serve_until(listener, config, parts, shutdown_signal()).await
    {
        eprintln!("redlock-proxy: {e:#}");
        return 1;
    }
    0
}

/// File descriptors the proxy needs besides one per client: the masters' connections, the
/// listeners, the metrics endpoint and the standard streams, with room to spare.
const SPARE_FILES: u64 = 64;

/// Raises the soft open-files limit to the hard limit, as Redis does at start, and warns when
/// `max_clients` still cannot be reached with what was obtained.
fn raise_open_files_limit(max_clients: usize) {
    let wanted = max_clients as u64 + SPARE_FILES;
    let before = rlimit::Resource::NOFILE.get().map(|(soft, _)| soft).ok();
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => {
            if before.is_some_and(|b| b < limit) {
                tracing::info!(
                    from = before,
                    to = limit,
                    "raised the open-files limit (RLIMIT_NOFILE) to its hard limit"
                );
            }
            if limit < wanted {
                tracing::warn!(
                    open_files_limit = limit,
                    max_clients,
                    "max_clients cannot be reached: the open-files limit allows about {} clients; \
                     raise the hard limit (systemd LimitNOFILE=, ulimit -Hn, docker --ulimit nofile=) \
                     or lower max_clients",
                    limit.saturating_sub(SPARE_FILES)
                );
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot read or raise the open-files limit"),
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return ctrl_c.await.unwrap_or(()),
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
