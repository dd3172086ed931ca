// Package node wires one FlexiQ node: store, NATS (embedded or external),
// the namespace actors, the flexiq service, the broadcasts, the admin door
// and maintenance. cmd/node turns flags into a Config and runs it; tests
// start whole nodes in-process the same way.
package node

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/admin"
	"github.com/flexiq/flexiq/auth"
	"github.com/flexiq/flexiq/bus"
	"github.com/flexiq/flexiq/cachebust"
	"github.com/flexiq/flexiq/cluster"
	"github.com/flexiq/flexiq/grpcapi"
	"github.com/flexiq/flexiq/internal/redact"
	"github.com/flexiq/flexiq/internal/tlsfiles"
	"github.com/flexiq/flexiq/retention"
	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/open"
	"github.com/flexiq/flexiq/ui"
)

// Config is a node's configuration (docs/configuration.md).
type Config struct {
	DataDir    string
	Store      string // store URL; empty = sqlite://<DataDir>/flexiq.db
	NATSURL    string // empty = run an embedded server
	NATSListen string
	AdminAddr  string
	// GRPCAddr is the gRPC surface's address; empty disables it.
	GRPCAddr string
	NodeID   string
	// Maintenance runs retention and sweeps on this node.
	Maintenance     bool
	ArchiveTTL      time.Duration
	DeadTTL         time.Duration
	CleanupInterval time.Duration
	CleanupBatch    int
	QuotaCacheTTL   time.Duration
	// RootToken is the root token's secret; empty = read
	// <DataDir>/root.token, generating it on first start.
	RootToken string
	// ClusterListen is the embedded server's route listener; empty = no
	// cluster. Routes are other nodes' route URLs.
	ClusterListen string
	Routes        []string
	ClusterName   string
	// ClusterSecret is the nodes' shared credential (NATS token of the
	// nodes' connections, password of the routes); empty = read
	// <DataDir>/cluster.secret, generating it on first start.
	ClusterSecret string
	// NATSCreds is a credentials file for the node's connection to an
	// external server (NATSURL).
	NATSCreds string
	// NATSTLSCert and NATSTLSKey put TLS on the embedded server.
	NATSTLSCert, NATSTLSKey string
	// TLSCert and TLSKey put TLS on the admin door (HTTPS) and the gRPC
	// surface; the files are read again when they change.
	TLSCert, TLSKey string
	// IdleAfter passivates idle actors (default 1 minute).
	IdleAfter time.Duration
	// RefusalPace paces clients' quota refusals (docs/protocol.md,
	// Refusals are paced; default actors.DefaultPace, zero: off).
	RefusalPace actors.Pace
	// SampleInterval is how often the usage history is sampled and the
	// quota alarms evaluated (docs/dashboard.md; default 10 s).
	SampleInterval time.Duration
	// ClusterJoinWait bounds how long a starting clustered node waits
	// for routes to every live member before it takes partitions anyway
	// (docs/cluster.md; default 10 s).
	ClusterJoinWait time.Duration
	Log             *slog.Logger
}

// Defaults returns the defaults of docs/configuration.md.
func Defaults() Config {
	return Config{
		DataDir:         "./flexiq-data",
		NATSListen:      "127.0.0.1:4222",
		AdminAddr:       "127.0.0.1:7070",
		GRPCAddr:        "127.0.0.1:7071",
		Maintenance:     true,
		ClusterName:     "flexiq",
		ArchiveTTL:      168 * time.Hour,
		DeadTTL:         720 * time.Hour,
		CleanupInterval: 30 * time.Second,
		CleanupBatch:    1000,
		QuotaCacheTTL:   2 * time.Second,
		SampleInterval:  admin.DefaultSampleInterval,
		RefusalPace:     actors.DefaultPace(),
		ClusterJoinWait: 10 * time.Second,
	}
}

// Node is a running node.
type Node struct {
	cfg     Config
	log     *slog.Logger
	Store   store.Store
	server  *server.Server
	nc      *nats.Conn
	Cache   *cachebust.Cache
	Actors  *actors.System
	service *bus.Service
	subs    *bus.Subscriptions
	Metrics *admin.Metrics
	// History is the usage history the dashboard charts.
	History *admin.History
	// Cleaner is the retention sweep (nil when maintenance is off).
	Cleaner *retention.Cleaner
	httpSrv *http.Server
	httpLn  net.Listener
	// adminScheme is http, or https with Config.TLSCert.
	adminScheme string
	// closing is closed when Stop begins (bus.RoutedSender.Closing).
	closing  chan struct{}
	grpcSrv  *grpcapi.Server
	grpcLn   net.Listener
	natsURL  string
	natsAuth *bus.ClientAuth
	callout  *bus.Callout
	cluster  *cluster.Cluster
	// clusterCtx ends the cluster loop, after the node left.
	clusterCtx    context.Context
	clusterCancel context.CancelFunc
	clusterBG     sync.WaitGroup
	// adopt wakes the namespaces with running jobs this node takes over.
	adopt     *adoption
	sender    *bus.RoutedSender
	adminURL  atomic.Value // string, once the admin door listens
	internal  *nats.Subscription
	sysNC     *nats.Conn
	authn     *auth.Authenticator
	secret    string
	rootToken string
	tokenFile string

	cancel   context.CancelFunc
	bg       sync.WaitGroup
	stopOnce sync.Once
	stopErr  error
}

// Start brings a node up. On error everything started is stopped again.
func Start(ctx context.Context, cfg Config) (n *Node, err error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.NodeID == "" {
		cfg.NodeID = DefaultNodeID()
	}
	if cfg.Store == "" {
		cfg.Store = "sqlite://" + filepath.Join(cfg.DataDir, "flexiq.db")
	}
	n = &Node{cfg: cfg, log: cfg.Log.With("node", cfg.NodeID), adopt: newAdoption(), adminScheme: "http"}
	defer func() {
		if err != nil {
			n.Stop(context.Background())
			n = nil
		}
	}()
	// docs/security.md: the data dir is 0700 and every file in it 0600;
	// a dir or file found wider (an older version's, an operator's) is tightened.
	if err := secureDataDir(cfg.DataDir, n.log); err != nil {
		return n, fmt.Errorf("data dir %s: %w", cfg.DataDir, err)
	}
	if n.rootToken, n.tokenFile, err = rootToken(cfg); err != nil {
		return n, err
	}

	n.Store, err = open.Open(ctx, cfg.Store)
	if err != nil {
		return n, fmt.Errorf("store: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = n.Store.Ping(pingCtx)
	cancel()
	if err != nil {
		return n, fmt.Errorf("store %s unreachable: %w", redact.URL(cfg.Store), redact.Error(err, cfg.Store))
	}

	if n.secret, err = clusterSecret(cfg); err != nil {
		return n, err
	}
	authn := auth.New(n.Store, n.rootToken, time.Now)
	n.authn = authn
	var natsTLS *tlsfiles.Pair
	if cfg.NATSURL == "" && (cfg.NATSTLSCert != "" || cfg.NATSTLSKey != "") {
		if natsTLS, err = tlsfiles.Load(cfg.NATSTLSCert, cfg.NATSTLSKey, "NATS TLS ("+natsTLSFlags+")", n.log); err != nil {
			return n, err
		}
	}
	if cfg.NATSURL == "" {
		n.natsAuth = bus.NewClientAuth(n.secret, authn, n.log)
		n.server, err = bus.StartEmbedded(bus.EmbeddedOptions{
			Listen: cfg.NATSListen, ServerName: cfg.NodeID, Auth: n.natsAuth,
			ClusterSecret: n.secret, ClusterListen: cfg.ClusterListen, Routes: cfg.Routes, ClusterName: cfg.ClusterName,
			TLS: natsTLS, Log: n.log, Hide: []string{n.rootToken},
		})
		if err != nil {
			return n, err
		}
		n.natsURL = n.server.ClientURL()
		warnIfExposed(n.log, "the embedded NATS server", n.server.Addr(), natsTLS != nil, natsTLSFlags)
		if ca := n.server.ClusterAddr(); ca != nil {
			warnIfExposed(n.log, "the embedded NATS server's routes", ca, natsTLS != nil, natsTLSFlags)
		}
	} else {
		n.natsURL = cfg.NATSURL
	}
	n.nc, err = bus.Connect(bus.ConnectOptions{
		URL: cfg.NATSURL, Server: n.server, Name: "flexiq-node-" + cfg.NodeID,
		Secret: n.secret, Creds: cfg.NATSCreds, TLS: natsTLS, Log: n.log,
	})
	if err != nil {
		return n, err
	}
	if cfg.NATSURL != "" {
		n.startCallout(authn)
	}
	if open.IsSQLite(cfg.Store) {
		// A SQLite store cannot be shared: refuse to serve next to another
		// node on the same bus (an external NATS server).
		if other, err := bus.OtherNode(n.nc, cfg.NodeID); err != nil {
			return n, err
		} else if other != "" {
			return n, fmt.Errorf("another FlexiQ node (%s) serves on this NATS bus; a SQLite store cannot be shared: give each node its own bus or use PostgreSQL or Redis", other)
		}
	}

	n.Metrics = admin.NewMetrics()
	if natsTLS != nil {
		n.Metrics.WatchCertificate("nats", natsTLS.NotAfter)
	}
	n.History = admin.NewHistory(n.Metrics, cfg.SampleInterval)
	n.Cache = cachebust.New(n.Store, cfg.QuotaCacheTTL, n.log)
	runCtx, runCancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = runCancel
	n.clusterCtx, n.clusterCancel = context.WithCancel(context.WithoutCancel(ctx))
	deps := actors.Deps{
		Store: n.Store, Snapshots: n.Cache, Log: n.log, Observer: n.Metrics, IdleAfter: cfg.IdleAfter, Pace: cfg.RefusalPace,
		OverlapAcks: true,
		// Measured faster on PostgreSQL only (actors.Deps.AnswerBeside).
		AnswerBeside: open.IsPostgres(cfg.Store),
	}
	if err := n.startCluster(ctx); err != nil {
		return n, err
	}
	var router bus.Router
	if n.cluster != nil {
		deps.Fences, router = n.cluster, n.cluster
	}
	n.Actors = actors.NewSystem(runCtx, deps)
	n.runCluster()
	n.startAdoption(runCtx)
	n.closing = make(chan struct{})
	n.sender = &bus.RoutedSender{Node: cfg.NodeID, NC: n.nc, Local: n.Actors, Router: router, Log: n.log, Closing: n.closing}
	if n.server != nil {
		n.sender.Interest = n.server.GlobalAccount().SubscriptionInterest
	}
	if router != nil {
		// A leaving node's calls that reach its stopped actors go to the
		// namespaces' new owners instead of failing.
		n.Actors.SetHandOff(n.sender.HandOff)
		// Calls from other nodes are routed again: the sender may have
		// named an owner that is not (yet, or any more) this node.
		if n.internal, err = bus.ServeInternalOps(n.nc, cfg.NodeID, n.sender, n.Cache, n.log); err != nil {
			return n, err
		}
	}
	// Broadcast listeners first: the service's drain on stop counts only
	// its own subscriptions.
	n.subs, err = bus.SubscribeBroadcasts(n.nc, n.Cache, tokenForgetter{n}, n.Metrics.Propagation, n.log)
	if err != nil {
		return n, err
	}
	// The service outlives runCtx: a leaving node still passes calls on
	// to the new owners until StopDirect.
	n.service, err = bus.NewService(context.WithoutCancel(runCtx), n.nc, cfg.NodeID, n.Actors, authn, router, n.log)
	if err != nil {
		return n, err
	}
	if n.server != nil {
		n.service.SetInterest(n.server.GlobalAccount().SubscriptionInterest)
	}
	if router != nil {
		n.clusterMetrics()
	}
	if err := n.nc.Flush(); err != nil {
		return n, fmt.Errorf("nats: %w", err)
	}

	// The admin door's bounds (docs/admin-api.md): at most admin.DefaultMaxConns
	// connections, /healthz answering past them; requests cut after 10 s,
	// idle connections after 60 s.
	var certs *tlsfiles.Pair
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		if certs, err = tlsfiles.Load(cfg.TLSCert, cfg.TLSKey, "TLS of the admin door and gRPC ("+adminTLSFlags+")", n.log); err != nil {
			return n, err
		}
		n.Metrics.WatchCertificate("admin_grpc", certs.NotAfter)
	}
	n.httpLn, err = admin.Listen(cfg.AdminAddr, admin.DefaultMaxConns)
	if err != nil {
		return n, fmt.Errorf("admin door on %s: %w", cfg.AdminAddr, err)
	}
	warnIfExposed(n.log, "the admin door", n.httpLn.Addr(), certs != nil, adminTLSFlags)
	if certs != nil {
		n.httpLn = tls.NewListener(n.httpLn, certs.ServerConfig())
		n.adminScheme = "https"
	}
	adminDoor := admin.New(admin.Deps{
		Store: n.Store, Auth: authn, Cache: n.Cache, Publisher: bus.SyncPublisher{Publisher: bus.Publisher{NC: n.nc}, Router: router, Log: n.log},
		Actors: n.sender, Metrics: n.Metrics, Log: n.log, Cluster: n, History: n.History, UI: ui.Handler(),
		Healthy: func() error {
			if !n.nc.IsConnected() {
				return errors.New("not connected to NATS")
			}
			return nil
		},
	})
	n.httpSrv = admin.NewServer(adminDoor, n.log, admin.Bounds{})
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		if err := n.httpSrv.Serve(n.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("admin door stopped", "err", err)
		}
	}()
	n.adminURL.Store(n.AdminURL())

	if cfg.GRPCAddr != "" {
		// The gRPC surface: the bus's authenticator, the admin door's
		// sender to the actors, and the admin door itself for its Admin
		// calls. Serve returns once a stop has answered every call in
		// flight, which the actors do when they stop: n.bg waits for it.
		n.grpcLn, err = net.Listen("tcp", cfg.GRPCAddr)
		if err != nil {
			return n, fmt.Errorf("grpc on %s: %w", cfg.GRPCAddr, err)
		}
		warnIfExposed(n.log, "gRPC", n.grpcLn.Addr(), certs != nil, adminTLSFlags)
		var opts []grpc.ServerOption
		if certs != nil {
			opts = append(opts, grpc.Creds(credentials.NewTLS(certs.ServerConfig())))
		}
		n.grpcSrv = grpcapi.New(grpcapi.Deps{Auth: authn, Actors: n.sender, Admin: adminDoor, Log: n.log}, opts...)
		n.bg.Add(1)
		go func() {
			defer n.bg.Done()
			if err := n.grpcSrv.Serve(n.grpcLn); err != nil {
				n.log.Error("grpc stopped", "err", err)
			}
		}()
	}

	if n.natsAuth != nil || n.callout != nil {
		n.bg.Add(1)
		go func() {
			defer n.bg.Done()
			n.sweepConnections(runCtx, authn.TTL()/2)
		}()
	}
	if cfg.Maintenance {
		n.startMaintenance(runCtx)
	}
	n.startUsage(runCtx)
	return n, nil
}

// ID is the node's id.
func (n *Node) ID() string { return n.cfg.NodeID }

// AdminURL is the admin door's base URL.
func (n *Node) AdminURL() string { return n.adminScheme + "://" + n.httpLn.Addr().String() }

// GRPCAddr is the gRPC surface's address ("" when disabled).
func (n *Node) GRPCAddr() string {
	if n.grpcLn == nil {
		return ""
	}
	return n.grpcLn.Addr().String()
}

// NATSURL is the URL clients use.
func (n *Node) NATSURL() string { return n.natsURL }

// RootToken is the root token's secret.
func (n *Node) RootToken() string { return n.rootToken }

// ClusterSecret is the nodes' shared credential.
func (n *Node) ClusterSecret() string { return n.secret }

// TokenFile is where the root token was written ("" when given by flag).
func (n *Node) TokenFile() string { return n.tokenFile }

// Stop stops the node in order: the admin door finishes its requests; the
// service stops taking requests on the plain subjects and drains those
// delivered; a clustered node leaves (its namespaces move) while it still
// passes on the calls sent straight or forwarded to it, until they fall
// quiet; the actors answer everything they hold; the connection flushes
// the answers; then NATS and the store close. ctx bounds it.
func (n *Node) Stop(ctx context.Context) error {
	n.stopOnce.Do(func() {
		var errs []error
		if n.closing != nil {
			// Long polls forwarded to other nodes end within a piece,
			// so the gRPC server's graceful stop below is not held up.
			close(n.closing)
		}
		if n.httpSrv != nil {
			if err := n.httpSrv.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("admin door: %w", err))
			}
		}
		if n.grpcSrv != nil {
			// Stops taking calls; those in flight are answered by the
			// time n.bg is done (below, after the actors stopped).
			n.grpcSrv.Stop(ctx)
		}
		if n.service != nil {
			if err := n.service.Stop(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		if n.cancel != nil {
			n.cancel() // maintenance loops
		}
		if n.cluster != nil {
			// From here on it follows the placement no more
			// (Cluster.Leaving): a call for a namespace it has given up
			// goes on to the next owner at once, marked to wait there for
			// the lease rather than come back (the next owner still sees
			// this node holding it).
			if err := n.leaveCluster(ctx); err != nil {
				errs = append(errs, fmt.Errorf("leave the cluster: %w", err))
			}
		} else if n.clusterCancel != nil {
			n.clusterCancel()
		}
		if n.Actors != nil {
			if err := n.Actors.Stop(ctx); err != nil {
				errs = append(errs, fmt.Errorf("actors: %w", err))
			}
		}
		if n.service != nil {
			// Calls still on their way here (owner subject, forwards,
			// other nodes' internal calls) are passed on to the new
			// owners until they fall quiet.
			if err := n.service.StopDirect(ctx, n.internal); err != nil {
				errs = append(errs, err)
			}
		} else if n.internal != nil {
			_ = n.internal.Unsubscribe()
		}
		if n.sender != nil {
			// The answers of the calls handed off on the way out.
			if err := n.sender.Wait(ctx); err != nil {
				errs = append(errs, fmt.Errorf("calls handed off: %w", err))
			}
		}
		n.bg.Wait()
		if n.subs != nil {
			n.subs.Close()
		}
		if n.callout != nil {
			n.callout.Stop()
		}
		if n.sysNC != nil {
			n.sysNC.Close()
		}
		if n.nc != nil {
			if err := n.nc.FlushTimeout(2 * time.Second); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				errs = append(errs, fmt.Errorf("nats flush: %w", err))
			}
			n.nc.Close()
		}
		if n.server != nil {
			n.server.Shutdown()
			n.server.WaitForShutdown()
		}
		if n.Store != nil {
			if err := n.Store.Close(); err != nil {
				errs = append(errs, fmt.Errorf("store: %w", err))
			}
		}
		n.stopErr = errors.Join(errs...)
	})
	return n.stopErr
}

// DefaultNodeID is the hostname and a random suffix.
func DefaultNodeID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "node"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%x", host, b)
}

// rootToken returns the root token: given, read from <data-dir>/root.token,
// or generated there (mode 0600) on first start.
func rootToken(cfg Config) (token, file string, err error) {
	if cfg.RootToken != "" {
		return cfg.RootToken, "", nil
	}
	file = filepath.Join(cfg.DataDir, "root.token")
	token, err = loadOrCreateSecret(file, "fq_root_", "root token")
	return token, file, err
}

// loadOrCreateSecret reads the secret in file, or generates one (256
// random bits after prefix) and writes it there with mode 0600.
func loadOrCreateSecret(file, prefix, what string) (string, error) {
	data, err := os.ReadFile(file)
	if err == nil {
		secret := strings.TrimSpace(string(data))
		if secret == "" {
			return "", fmt.Errorf("%s file %s is empty", what, file)
		}
		return secret, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%s file %s: %w", what, file, err)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	secret := prefix + base64.RawURLEncoding.EncodeToString(b[:])
	if err := writeSecret(file, []byte(secret+"\n")); err != nil {
		return "", fmt.Errorf("write %s to %s: %w", what, file, err)
	}
	return secret, nil
}
