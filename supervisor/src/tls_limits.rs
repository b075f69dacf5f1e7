//! The `[tls]` and `[limits]` sections of the config file, and the matching flags of
//! `recached server` / `recached proxy` (docs/security-tls.md).
//!
//! ```toml
//! [tls]                       # Redis tls-* settings
//! cert_file = "server.crt"    # PEM chain, leaf first
//! key_file = "server.key"
//! ca_cert_file = ""           # PEM roots for client certificates
//! auth_clients = "no"         # no | yes | optional
//! proxy_port = 0              # the proxy's TLS port; 0 = none
//! engine_port_base = 0        # engine i: TLS on engine_port_base + i; 0 = none
//! fanout_port = 0             # the fan-out's HTTPS + wss:// port; 0 = none
//! memcached_port = 0          # the proxy's memcached protocol over TLS; 0 = none
//!
//! [limits]                    # every RESP port: engines and the proxy
//! maxclients = 10000
//! timeout = 0
//! client_query_buffer_limit = "1gb"
//! client_output_buffer_limit = "normal 0 0 0 pubsub 32mb 8mb 60"
//! ```
//!
//! Precedence as everywhere: default < file < flag. A role started with `--port 0` and a
//! TLS port serves TLS only (Redis `port 0`).

use std::path::PathBuf;

use clap::Args;
use engine_core::cmd::server::OutputLimits;
use recached_net::tls::{AuthClients, TlsOptions};
use serde::Deserialize;

use crate::config::{FileConfig, Size};

/// `[tls]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSection {
    /// Certificate chain (PEM, leaf first); needed when a TLS port is set.
    pub cert_file: String,
    /// Private key of the certificate (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: String,
    /// CA certificates (PEM) client certificates must chain to; empty = none.
    pub ca_cert_file: String,
    /// `no` (default), `yes` (client certificate required) or `optional`.
    pub auth_clients: String,
    /// The proxy's TLS port; 0 = no TLS on the proxy.
    pub proxy_port: u16,
    /// Engine i also serves TLS on `engine_port_base + i` (instance index); 0 = none.
    pub engine_port_base: u16,
    /// The fan-out's HTTPS + wss:// port; 0 = no TLS on the fan-out.
    pub fanout_port: u16,
    /// The proxy's memcached protocol over TLS (docs/memcached.md); 0 = none.
    pub memcached_port: u16,
}

impl Default for TlsSection {
    fn default() -> Self {
        TlsSection {
            cert_file: String::new(),
            key_file: String::new(),
            ca_cert_file: String::new(),
            auth_clients: "no".into(),
            proxy_port: 0,
            engine_port_base: 0,
            fanout_port: 0,
            memcached_port: 0,
        }
    }
}

/// `[limits]`: Redis-named limits of every RESP port (engines and the proxy).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    /// Most clients at once; one more gets `-ERR max number of clients reached`.
    pub maxclients: u64,
    /// Seconds without a command after which a client is closed; 0 = never.
    pub timeout: u64,
    /// Unparsed input one client may have buffered (at least 1mb).
    pub client_query_buffer_limit: Size,
    /// `<class> <hard> <soft> <soft seconds>` groups, as redis.conf writes them.
    pub client_output_buffer_limit: String,
}

impl Default for LimitsSection {
    fn default() -> Self {
        let core = engine_core::Config::default();
        LimitsSection {
            maxclients: core.maxclients,
            timeout: core.timeout,
            client_query_buffer_limit: Size(core.client_query_buffer_limit),
            client_output_buffer_limit: "normal 0 0 0 pubsub 32mb 8mb 60".into(),
        }
    }
}

/// TLS flags of `recached server` and `recached proxy` (Redis's option names).
#[derive(Args, Debug, Default, Clone)]
pub struct TlsArgs {
    /// TLS port; 0 = none. Default: the config's `[tls]` port for the role.
    #[arg(long)]
    pub tls_port: Option<u16>,
    /// Certificate chain (PEM). Default: `[tls] cert_file`.
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// Private key (PEM). Default: `[tls] key_file`.
    #[arg(long)]
    pub tls_key_file: Option<PathBuf>,
    /// CA certificates for client certificates (PEM). Default: `[tls] ca_cert_file`.
    #[arg(long)]
    pub tls_ca_cert_file: Option<PathBuf>,
    /// Client certificates: no, yes or optional. Default: `[tls] auth_clients` (no).
    #[arg(long)]
    pub tls_auth_clients: Option<String>,
}

/// Limit flags of `recached server` and `recached proxy`; each overrides `[limits]`.
#[derive(Args, Debug, Default, Clone)]
pub struct LimitArgs {
    /// Most clients at once (Redis maxclients).
    #[arg(long)]
    pub maxclients: Option<u64>,
    /// Idle client timeout, seconds; 0 = never (Redis timeout).
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Unparsed input per client, bytes or a size such as 64mb (Redis client-query-buffer-limit).
    #[arg(long)]
    pub client_query_buffer_limit: Option<String>,
    /// E.g. "pubsub 32mb 8mb 60" (Redis client-output-buffer-limit).
    #[arg(long)]
    pub client_output_buffer_limit: Option<String>,
}

impl LimitsSection {
    /// The output limits, parsed (validated by [`validate`]).
    fn output_limits(&self) -> Result<OutputLimits, String> {
        let mut l = OutputLimits::default();
        l.apply(self.client_output_buffer_limit.as_bytes())
            .map_err(|e| format!("limits.client_output_buffer_limit: {e}"))?;
        Ok(l)
    }

    /// The section with the flags applied.
    fn with_flags(&self, args: &LimitArgs) -> Result<LimitsSection, String> {
        let mut l = self.clone();
        if let Some(n) = args.maxclients {
            l.maxclients = n;
        }
        if let Some(n) = args.timeout {
            l.timeout = n;
        }
        if let Some(s) = &args.client_query_buffer_limit {
            l.client_query_buffer_limit = Size(crate::config::parse_size(s).ok_or_else(|| {
                format!("--client-query-buffer-limit: {s:?} is not a size such as 64mb")
            })?);
        }
        if let Some(s) = &args.client_output_buffer_limit {
            // Applied on top of the file's value, as CONFIG SET applies on top of the current.
            l.client_output_buffer_limit = format!("{} {s}", l.client_output_buffer_limit);
        }
        validate_limits(&l)?;
        Ok(l)
    }
}

fn validate_limits(l: &LimitsSection) -> Result<(), String> {
    if l.maxclients == 0 || l.maxclients > u64::from(u32::MAX) {
        return Err("limits.maxclients must be between 1 and 4294967295".into());
    }
    if l.timeout > i32::MAX as u64 {
        return Err("limits.timeout must be at most 2147483647 seconds".into());
    }
    if l.client_query_buffer_limit.0 < 1024 * 1024 {
        return Err("limits.client_query_buffer_limit must be at least 1mb".into());
    }
    l.output_limits().map(|_| ())
}

/// Checks `[tls]` and `[limits]` (called from `FileConfig::validate`).
pub fn validate(file: &FileConfig) -> Result<(), String> {
    validate_limits(&file.limits)?;
    let t = &file.tls;
    if AuthClients::parse(auth_word(&t.auth_clients)).is_none() {
        return Err(format!(
            "tls.auth_clients must be \"no\", \"yes\" or \"optional\", got {:?}",
            t.auth_clients
        ));
    }
    if (t.proxy_port != 0 || t.engine_port_base != 0 || t.fanout_port != 0 || t.memcached_port != 0)
        && (t.cert_file.trim().is_empty() || t.key_file.trim().is_empty())
    {
        return Err("tls: a TLS port needs tls.cert_file and tls.key_file".into());
    }
    Ok(())
}

fn auth_word(s: &str) -> &str {
    if s.trim().is_empty() { "no" } else { s }
}

/// The TLS options of a role: flags over the file; `default_port` is the file's TLS port for
/// the role (0 = none).
pub fn tls_options(
    file: &FileConfig,
    args: &TlsArgs,
    default_port: u16,
) -> Result<TlsOptions, String> {
    let t = &file.tls;
    let path = |flag: &Option<PathBuf>, key: &str| -> Option<PathBuf> {
        flag.clone()
            .or_else(|| (!key.trim().is_empty()).then(|| PathBuf::from(key.trim())))
    };
    let auth = args
        .tls_auth_clients
        .clone()
        .unwrap_or_else(|| t.auth_clients.clone());
    let auth_clients = AuthClients::parse(auth_word(&auth))
        .ok_or_else(|| format!("--tls-auth-clients must be no, yes or optional, got {auth:?}"))?;
    let opts = TlsOptions {
        port: args.tls_port.unwrap_or(default_port),
        cert_file: path(&args.tls_cert_file, &t.cert_file).unwrap_or_default(),
        key_file: path(&args.tls_key_file, &t.key_file).unwrap_or_default(),
        ca_cert_file: path(&args.tls_ca_cert_file, &t.ca_cert_file),
        auth_clients,
    };
    if opts.enabled()
        && (opts.cert_file.as_os_str().is_empty() || opts.key_file.as_os_str().is_empty())
    {
        return Err("TLS needs --tls-cert-file and --tls-key-file (or [tls] in the config)".into());
    }
    Ok(opts)
}

/// Applies `[limits]` and the limit flags to an engine's settings.
pub fn apply_engine_limits(
    file: &FileConfig,
    args: &LimitArgs,
    engine: &mut engine_core::Config,
) -> Result<(), String> {
    let l = file.limits.with_flags(args)?;
    engine.maxclients = l.maxclients;
    engine.timeout = l.timeout;
    engine.client_query_buffer_limit = l.client_query_buffer_limit.0;
    engine.client_output_buffer_limit = l.output_limits()?;
    Ok(())
}

/// The proxy's limits from `[limits]`, the flags and `[engine] proto_max_bulk_len`.
pub fn proxy_limits(
    file: &FileConfig,
    args: &LimitArgs,
) -> Result<recached_proxy::tls::ProxyLimits, String> {
    let l = file.limits.with_flags(args)?;
    Ok(recached_proxy::tls::ProxyLimits {
        maxclients: usize::try_from(l.maxclients).unwrap_or(usize::MAX),
        client_query_buffer_limit: usize::try_from(l.client_query_buffer_limit.0)
            .unwrap_or(usize::MAX),
        proto_max_bulk_len: usize::try_from(file.engine.proto_max_bulk_len.0).unwrap_or(usize::MAX),
        client_output_buffer_limit: l.output_limits()?,
        timeout: l.timeout,
        cluster_publish: file.cluster,
        databases: file.engine.databases,
    })
}

/// The TLS port the supervisor gives engine instance `index` (`--tls-port`), if any.
pub fn engine_tls_port(file: &FileConfig, index: usize) -> Option<u16> {
    let base = file.tls.engine_port_base;
    (base != 0).then(|| base.saturating_add(index as u16))
}

#[cfg(test)]
mod tests {
    use crate::config::parse;

    use super::*;

    #[test]
    fn limits_reach_the_engine_and_the_proxy() {
        let c = parse(
            "[limits]\nmaxclients = 50\ntimeout = 7\nclient_query_buffer_limit = \"2mb\"\n\
             client_output_buffer_limit = \"pubsub 1mb 512kb 5\"\n",
        )
        .unwrap();
        validate(&c).unwrap();
        let mut e = engine_core::Config::default();
        apply_engine_limits(&c, &LimitArgs::default(), &mut e).unwrap();
        assert_eq!((e.maxclients, e.timeout), (50, 7));
        assert_eq!(e.client_query_buffer_limit, 2 << 20);
        assert_eq!(e.client_output_buffer_limit.pubsub.hard, 1 << 20);
        assert_eq!(e.client_output_buffer_limit.pubsub.soft_seconds, 5);
        let args = LimitArgs {
            maxclients: Some(3),
            ..LimitArgs::default()
        };
        let p = proxy_limits(&c, &args).unwrap();
        assert_eq!(p.maxclients, 3);
        assert_eq!(p.timeout, 7);
        assert_eq!(p.client_output_buffer_limit.pubsub.soft, 512 << 10);
    }

    #[test]
    fn output_limit_hard_and_soft_semantics() {
        use engine_core::cmd::server::OutputLimit;
        let l = OutputLimit {
            hard: 100,
            soft: 10,
            soft_seconds: 2,
        };
        let mut since = None;
        assert!(!l.exceeded(5, &mut since, 0));
        assert!(l.exceeded(100, &mut since, 0), "hard limit closes at once");
        // Over soft: closed only after 2 s in a row over it.
        assert!(!l.exceeded(50, &mut since, 1_000_000));
        assert!(!l.exceeded(50, &mut since, 2_500_000));
        assert!(l.exceeded(50, &mut since, 3_000_000));
        // Dropping below soft resets the clock.
        assert!(!l.exceeded(5, &mut since, 3_100_000));
        assert_eq!(since, None);
        assert!(!l.exceeded(50, &mut since, 4_000_000));
        assert!(!OutputLimit::NONE.exceeded(u64::MAX, &mut None, 0));
    }

    #[test]
    fn bad_limits_and_tls_are_refused() {
        for bad in [
            "[limits]\nmaxclients = 0\n",
            "[limits]\nclient_query_buffer_limit = \"1k\"\n",
            "[limits]\nclient_output_buffer_limit = \"pubsub 1 2\"\n",
            "[limits]\nclient_output_buffer_limit = \"master 1 2 3\"\n",
            "[tls]\nauth_clients = \"sometimes\"\n",
            "[tls]\nproxy_port = 6443\n",
            "[tls]\nmemcached_port = 11212\n",
        ] {
            assert!(validate(&parse(bad).unwrap()).is_err(), "{bad}");
        }
        let c =
            parse("[tls]\ncert_file = \"a\"\nkey_file = \"b\"\nengine_port_base = 7400\n").unwrap();
        validate(&c).unwrap();
        assert_eq!(engine_tls_port(&c, 2), Some(7402));
        let o = tls_options(&c, &TlsArgs::default(), 7400).unwrap();
        assert_eq!(o.port, 7400);
        assert_eq!(o.auth_clients, AuthClients::No);
        assert_eq!(o.ca_cert_file, None);
    }
}
