//! The `herald` binary: parses the command line and runs the server library
//! (`serve`) or copies a running server's embedded store (`backup`).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use herald::config::ServeArgs;

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings, read when it starts (`_RJEM_MALLOC_CONF` in the
/// environment still wins). A background thread returns freed memory to the
/// system on jemalloc's decay schedule (about 10 s) even while the node is
/// idle; without it, purging happens only inside allocation calls, so what a
/// burst of joins or a catch-up freed stays resident on a quiet node
/// (measured: 2.16 against 2.00 KB per idle connection, docs/memory.md).
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: Option<&'static u8> = Some(&b"background_thread:true\0"[0]);

#[derive(Parser)]
#[command(name = "herald", version, about = "A real-time chat server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a server.
    Serve(Box<ServeArgs>),
    /// Copy the embedded store to a file, consistently, while a server runs on it.
    Backup(BackupArgs),
}

#[derive(Args)]
struct BackupArgs {
    /// The server's data directory (its `--data`).
    #[arg(long, env = "HERALD_DATA")]
    data: PathBuf,
    /// The backup file; replaced only once the new copy is whole and checked.
    #[arg(long)]
    to: PathBuf,
}

/// Runs herald; a failure is one line on standard error (`herald: why: cause`),
/// never a backtrace, and exit status 1.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("herald: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    // A `--config` file's values become `serve`'s defaults before parsing,
    // so flags and env still win over it (herald::config).
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let matches = herald::config::with_config_file(Cli::command(), &args)?.get_matches_from(&args);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match cli.command {
        Command::Serve(args) => serve(*args),
        Command::Backup(args) => {
            let s = herald::backup::backup(&args.data, &args.to)?;
            println!(
                "herald backup: {} -> {}: chats={} events={} bytes={} ms={}",
                args.data.display(),
                args.to.display(),
                s.chats,
                s.events,
                s.bytes,
                s.took.as_millis()
            );
            Ok(())
        }
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = args.resolve()?;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| config.server.log.as_str().into()),
        )
        .with_ansi(log_in_colour())
        .init();
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(config.server.listen)
            .await
            .with_context(|| format!("binding {}", config.server.listen))?;
        let addr = listener.local_addr()?;
        if config.dev_mode {
            // Printed once, to stdout, so a developer can copy them.
            println!("herald development mode: these are the secrets of this run (random where none was given;");
            println!("  set them, or pass --dev with your own, to keep them across restarts):");
            println!("  HERALD_JWT_SECRET={}", config.tokens.secret.as_deref().unwrap_or_default());
            println!("  HERALD_API_KEY={}", config.api_key);
            println!("  demo page: http://{addr}/   dev tokens: POST http://{addr}/v1/dev/token (loopback only)");
            println!("  admin page: http://{addr}/admin (sign in with the HERALD_API_KEY above)");
        }
        println!("herald listening on {addr}");
        herald::run(listener, config, shutdown_signal()).await
    })
}

/// Whether log lines carry ANSI colour codes: only when they go to a terminal
/// (the log writer is standard output), and `NO_COLOR` is unset or empty
/// (<https://no-color.org>). In a file, a pipe or the journal, the codes are
/// noise that every reader has to strip.
fn log_in_colour() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
