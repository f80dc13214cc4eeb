// Package pacer keeps the calls of every runner pod through one rate-limited
// key within the provider's token buckets. Providers enforce a per-minute limit
// as a bucket refilled continuously that may hold only a second of it (a 60 RPM
// limit enforced as 1 request per second); runner pods that each keep within
// their share of the minute still send at the same moments now and then, and
// together overflow such a bucket. A share of a rate cannot say *when*; one
// place that sees every call can. The pacer is that place: a service of the
// manager's leader that runner pods ask, before each call, when it may go.
//
// It keeps one ratelimit.Limiter per key (a model's own rate limit, a
// ModelEndpoint's, or a ModelQuota's for the endpoints naming it), with the
// key's limits and burst as the resources say now, and answers each request
// with a wait. The runner pods' own limiters, at their shares of the budgets,
// still decide how much each may send (fairness by weight); the pacer only
// spaces what they send. A pod that cannot reach the pacer paces on its own
// (its shares keep the minute; bursts may draw 429s, which are waited out)
// and says so.
package pacer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/jonboulle/clockwork"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"

	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// DefaultHorizon is how far ahead the pacer gives a call a place: a call
// further ahead is told to ask again later. A new leader therefore gives no
// place for that long (every place its predecessor gave has come by then),
// and starts each key's bucket empty.
const DefaultHorizon = 3 * time.Second

// DefaultBusyHorizon is how far ahead the pacer places the calls of a caller it
// placed a call of within the last Horizon (one that is sending): further
// ahead, it is told to ask again. A caller it has not placed for that long (a
// shard's first call, or one that sends seldom) gets the next place, up to
// Horizon ahead.
//
// A busy key's queue of places stays at its horizon, since its callers' own
// limiters send its whole rate between them and ask for places as fast as
// they come; first come, first placed, a shard that joins waits behind that
// queue, and with a horizon of 3 s for everyone a second namespace's first
// call came 3.3-3.6 s after its runner pod started on the local cluster (the
// goal is 2 s), 1-1.5 s of it in the queue. A short horizon for everyone is no
// better: the calls told to ask again race for each place, and a newcomer's
// few calls lose to the many already waiting (1.9 s in the queue at 500 ms).
// A short horizon for the busy callers keeps the queue short, and the
// newcomer's call goes next. The busy callers' calls that are asked to come
// again cost a request to the pacer each; few wait at once, since the pods'
// own limiters pace them at their shares. A caller refused places for a whole
// horizon is new again, so none starves behind the others' retries.
const DefaultBusyHorizon = 250 * time.Millisecond

// Bucket is the key a call goes through, as the resources say now.
type Bucket struct {
	// Key names it: "quota/NAME", "endpoint/NAMESPACE/NAME" or
	// "evaluation/NAMESPACE/NAME/MODEL".
	Key    string
	Limits ratelimit.Limits
	// Burst is how much of each limit the provider's buckets hold, as the
	// time the limit takes to refill it.
	Burst time.Duration
}

// Resolver finds the bucket of a caller of an Evaluation, and the
// ServiceAccount its runner pods run as (the only one that may ask for it).
type Resolver interface {
	Resolve(ctx context.Context, namespace, evaluation, caller string) (Bucket, string, error)
}

// ErrUnknown is a Resolver's error for an Evaluation or caller it does not
// know.
var ErrUnknown = errors.New("unknown")

// Server is the pacer. It is a controller-runtime Runnable that runs on the
// leader only.
type Server struct {
	// Addr is the address to listen on, unless Listener is set.
	Addr     string
	Listener net.Listener
	// Resolver finds each call's bucket.
	Resolver Resolver
	// Authenticator checks the bearer tokens of runner pods (TokenReview,
	// audience cluster.PacerAudience); nil trusts the request's identity
	// header X-Remote-User (tests only).
	Authenticator authenticator.Request
	Clock         clockwork.Clock
	Log           logr.Logger
	// Horizon: see DefaultHorizon.
	Horizon time.Duration
	// BusyHorizon: see DefaultBusyHorizon.
	BusyHorizon time.Duration

	mu        sync.Mutex
	start     time.Time
	buckets   map[string]*bucket
	places    map[string]*held
	prefix    string
	seq       uint64
	listening string
}

type bucket struct {
	lim    *ratelimit.Limiter
	limits ratelimit.Limits
	burst  time.Duration
	used   time.Time
	// placed is when each caller (a runner ServiceAccount: one Evaluation's
	// pods) was last given a place.
	placed map[string]time.Time
}

// held is a call's place in its bucket, until the call is settled.
type held struct {
	r    *ratelimit.Reservation
	user string
	at   time.Time
}

// NeedLeaderElection: only the leader paces, or two would space calls apart.
func (s *Server) NeedLeaderElection() bool { return true }

// Listening is the address the pacer listens on, once it does.
func (s *Server) Listening() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listening
}

func (s *Server) init() {
	if s.Clock == nil {
		s.Clock = clockwork.NewRealClock()
	}
	if s.Horizon == 0 {
		s.Horizon = DefaultHorizon
	}
	if s.BusyHorizon == 0 {
		s.BusyHorizon = min(DefaultBusyHorizon, s.Horizon)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	s.prefix = hex.EncodeToString(b[:])
	s.start = s.Clock.Now()
	s.buckets, s.places = map[string]*bucket{}, map[string]*held{}
}

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	s.init()
	s.mu.Unlock()
	ln := s.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.Addr); err != nil {
			return fmt.Errorf("pacer: %w", err)
		}
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // one connection a runner pod, calls multiplexed
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, Protocols: &protocols}
	s.mu.Lock()
	s.listening = ln.Addr().String()
	s.mu.Unlock()
	s.Log.Info("Started the pacer", "address", ln.Addr().String(), "horizon", s.Horizon.String(), "busyHorizon", s.BusyHorizon.String())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := s.Clock.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
				return
			case <-t.Chan():
				s.collect()
			}
		}
	}()
	err := srv.Serve(ln)
	<-done
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Handler serves the pacer's endpoints.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+cluster.PacerReservePath, s.serveReserve)
	mux.HandleFunc("POST "+cluster.PacerSettlePath, s.serveSettle)
	return mux
}

// user authenticates a request: the ServiceAccount user it comes from.
func (s *Server) user(w http.ResponseWriter, r *http.Request) (string, bool) {
	if s.Authenticator == nil {
		return r.Header.Get("X-Remote-User"), true
	}
	// Only tokens made for the pacer (the TokenReview asks for its audience).
	r = r.WithContext(authenticator.WithAudiences(r.Context(), authenticator.Audiences{cluster.PacerAudience}))
	res, ok, err := s.Authenticator.AuthenticateRequest(r)
	if err != nil || !ok {
		if err != nil {
			s.Log.Info("Refused a pacer request: its token did not authenticate", "error", err.Error())
		}
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return "", false
	}
	return res.User.GetName(), true
}

func (s *Server) serveReserve(w http.ResponseWriter, r *http.Request) {
	user, ok := s.user(w, r)
	if !ok {
		return
	}
	var req cluster.PaceRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<10)).Decode(&req); err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	b, sa, err := s.Resolver.Resolve(r.Context(), req.Namespace, req.Evaluation, req.Caller)
	switch {
	case errors.Is(err, ErrUnknown):
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if want := serviceaccount.MakeUsername(req.Namespace, sa); user != want {
		http.Error(w, fmt.Sprintf("%s may not pace the calls of Evaluation %s/%s (its runner pods run as %s)", user, req.Namespace, req.Evaluation, want), http.StatusForbidden)
		return
	}
	writeJSON(w, s.Reserve(b, user, req.Cost))
}

func (s *Server) serveSettle(w http.ResponseWriter, r *http.Request) {
	user, ok := s.user(w, r)
	if !ok {
		return
	}
	var req cluster.PaceSettlement
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<20)).Decode(&req); err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	s.Settle(user, req.Calls)
	w.WriteHeader(http.StatusNoContent)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Reserve gives a call of cost through b a place, for user.
func (s *Server) Reserve(b Bucket, user string, cost ratelimit.Cost) cluster.PaceResponse {
	if b.Limits.IsZero() {
		return cluster.PaceResponse{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buckets == nil {
		s.init()
	}
	now := s.Clock.Now()
	// What the last leader gave places for has all been sent by then.
	if ready := s.start.Add(s.Horizon); now.Before(ready) {
		return cluster.PaceResponse{RetryNanos: int64(ready.Sub(now))}
	}
	bk := s.buckets[b.Key]
	if bk == nil {
		bk = &bucket{lim: ratelimit.New(b.Limits, ratelimit.DefaultSlack, s.Clock), limits: b.Limits, placed: map[string]time.Time{}}
		s.buckets[b.Key] = bk
		bk.setBurst(b.Burst)
		if now.Before(s.start.Add(s.Horizon + ratelimit.Period)) {
			// Just elected: the provider's bucket may have been emptied by
			// the calls of the last leader's places.
			bk.lim.Drain(now)
		}
	}
	bk.used = now
	if bk.limits != b.Limits {
		bk.lim.SetLimits(b.Limits)
		bk.limits = b.Limits
	}
	if bk.burst != b.Burst {
		bk.setBurst(b.Burst)
	}
	horizon := s.Horizon
	if last, ok := bk.placed[user]; ok && now.Sub(last) < s.Horizon {
		horizon = s.BusyHorizon
	}
	r := bk.lim.Reserve(cost)
	wait := r.At().Sub(now)
	if wait > horizon {
		// Too far ahead to promise: ask again when it is near.
		r.Cancel()
		return cluster.PaceResponse{RetryNanos: int64(wait - horizon/2)}
	}
	bk.placed[user] = now
	s.seq++
	id := fmt.Sprintf("%s-%d", s.prefix, s.seq)
	s.places[id] = &held{r: r, user: user, at: now}
	return cluster.PaceResponse{ID: id, WaitNanos: int64(max(wait, 0))}
}

// setBurst paces at half the provider's burst: a call's arrival at the
// provider differs from its place by the network's and the runner's delays,
// which the other half absorbs.
func (bk *bucket) setBurst(d time.Duration) {
	bk.burst = d
	if d <= 0 {
		d = ratelimit.DefaultBurst
	}
	// Requests: half the bucket, at least one request at a time.
	bk.lim.SetBurst(ratelimit.Burst{Requests: d / 2, Tokens: d / 2})
}

// Settle settles user's calls.
func (s *Server) Settle(user string, calls []cluster.SettledCall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range calls {
		p := s.places[c.ID]
		if p == nil || p.user != user {
			continue
		}
		delete(s.places, c.ID)
		if c.Cancel {
			p.r.Cancel()
		} else {
			p.r.Settle(c.Cost)
		}
	}
}

// collect forgets places never settled after an hour (their pods are gone),
// and buckets unused for ten minutes.
func (s *Server) collect() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Clock.Now()
	for id, p := range s.places {
		if now.Sub(p.at) > time.Hour {
			delete(s.places, id)
		}
	}
	for k, b := range s.buckets {
		if now.Sub(b.used) > 10*time.Minute {
			delete(s.buckets, k)
			continue
		}
		for user, at := range b.placed {
			if now.Sub(at) >= s.Horizon {
				delete(b.placed, user)
			}
		}
	}
}
