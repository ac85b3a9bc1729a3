package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alkstore/alkstore/internal/litedriver"
	"github.com/alkstore/alkstore/internal/wake"
)

// Consumer groups (docs/design/consumer-groups.md): the members of a named
// group on a stream, in any number of processes, share its events. The
// group's events are split into a fixed number of partitions: a keyed event
// belongs to the partition its key hashes to (GroupPartition), an unkeyed
// one to a hash of its offset modulo the count. Each partition has at most
// one owner at a time, which holds it through a lease fenced by a token
// (every claim increments it), and its own committed offset. Members join, heartbeat and
// leave through the database; each takes its fair share of the partitions
// (the count divided by the live members), releases what is beyond it and
// claims free or expired partitions within it, on the group's wakes.

const (
	// DefaultGroupPartitions is a new group's partition count unless
	// GroupOpts.Partitions says otherwise: the most members that can
	// share the stream's events at once.
	DefaultGroupPartitions = 16
	// MaxGroupPartitions bounds GroupOpts.Partitions.
	MaxGroupPartitions = 1024
	// DefaultGroupLeaseTTL is how long a member's share outlives its last
	// heartbeat: after a crash, its partitions go to the others this late.
	DefaultGroupLeaseTTL = 10 * time.Second
	// DefaultGroupPageBytes bounds what one read of a member holds unless
	// GroupOpts.PageBytes says otherwise: 16 MiB of payloads, keys and
	// headers (4 events at MaxPayloadSize), where 256 events at the limit
	// were 1 GiB.
	DefaultGroupPageBytes = 16 << 20
)

// Group is a handle on a consumer group of a stream. Creating one does no
// I/O; a bad stream or group name is reported by every operation.
type Group struct {
	handle // name: "stream/group", for errors
	st     *Stream
	group  string
}

// Group returns the handle of the consumer group called name on the stream.
func (st *Stream) Group(name string) *Group {
	h := handle{s: st.s, name: st.name + "/" + name}
	if st.err != nil {
		h.err = fmt.Errorf("the group's stream name: %w", st.err)
	} else {
		h.err = validateLocalName("group", name)
	}
	return &Group{handle: h, st: st, group: name}
}

// Name returns the group's name.
func (g *Group) Name() string { return g.group }

// Stream returns the stream the group consumes.
func (g *Group) Stream() *Stream { return g.st }

func groupTopic(stream, group string) string { return "g:" + stream + "/" + group }

// GroupPartition is the partition of a group of partitions partitions that
// an event belongs to: FNV-1a (32 bits) of its key modulo partitions, or,
// for an unkeyed event, a mix of its offset (SplitMix64's finalizer)
// modulo partitions: offsets are numbered across all streams, so the
// offset itself would tie the sharing to how other streams' publishes
// interleave (two streams published alternately would put all of one's
// events in every other partition). Every process computes the same, on
// either engine.
func GroupPartition(ev Event, partitions int) int {
	if partitions <= 0 {
		return 0
	}
	if ev.Key == nil {
		x := uint64(ev.Offset)
		x ^= x >> 30
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 27
		x *= 0x94d049bb133111eb
		x ^= x >> 31
		return int(x % uint64(partitions))
	}
	return KeyPartition(*ev.Key, partitions)
}

// KeyPartition is the partition a key's events belong to in a group of
// partitions partitions (see GroupPartition).
func KeyPartition(key string, partitions int) int {
	if partitions <= 0 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(partitions))
}

// GroupOpts configure a group member (Group.Join, Consume, ConsumeTx).
// Zero values take the defaults.
type GroupOpts struct {
	// Member names the member (a random suffix makes each join's id
	// unique); default DefaultWorkerName().
	Member string
	// Partitions is the group's partition count, fixed when its first
	// member creates it: default DefaultGroupPartitions, at most
	// MaxGroupPartitions. Set on a group that exists, it must match.
	Partitions int
	// LeaseTTL is how long the member's share outlives its last heartbeat
	// (it heartbeats every third of it); default DefaultGroupLeaseTTL, at
	// least 100ms. A graceful leave hands over at once.
	LeaseTTL time.Duration
	// PageSize is how many events one read of the stream takes; default 256.
	PageSize int
	// PageBytes bounds the bytes one read of the stream holds, its events'
	// payloads, keys and headers added up: a page ends before the event
	// that would take it past PageBytes (its first event is taken whatever
	// its size), and the events after the cut come in the next read, none
	// skipped. Default DefaultGroupPageBytes (16 MiB).
	PageBytes int
	// SafetyPoll: read and rebalance this often even without a wake
	// (wakes are best-effort); default 5s.
	SafetyPoll time.Duration
	// RetryDelay: Consume and ConsumeTx hand an event whose handler failed
	// to the handler again this much later; default 1s.
	RetryDelay time.Duration
	// CommitInterval: Consume commits each partition's progress at most
	// this often (and whenever it runs out of events, releases a partition
	// or leaves) instead of after every event: one write per partition and
	// interval instead of one per event, for as many events handled again
	// after a crash. 0 (the default) commits after every event. ConsumeTx
	// commits in each event's transaction, whatever it says.
	CommitInterval time.Duration
	// Grace: when Consume or ConsumeTx is stopped, the handler in flight
	// may finish (and commit) for this long before its context is
	// cancelled; default 30s. A store's hard stop cancels it at once. A
	// handler that ignores its cancelled context is left behind 5s later,
	// as Work leaves one: its event is not committed (ConsumeTx: its
	// transaction is rolled back) and the member leaves.
	Grace time.Duration
	// HardStop, once closed, ends the Grace at once, as a store's hard
	// stop does (nil: only the store's): the handler's context is
	// cancelled and one that ignores it is left behind 5s later. Package
	// client closes it at a hard Stop.
	HardStop <-chan struct{}
	// Logger: failed reads, heartbeats and handlers, leases that lapsed
	// and claims that landed after their lease; default the store's. The
	// heartbeat's failures and the two lapses are logged once a minute at
	// most each, per member, each line saying how many it held back
	// ("suppressed").
	Logger *slog.Logger
}

func (o GroupOpts) withDefaults(s *Store) (GroupOpts, error) {
	switch {
	case o.Partitions < 0 || o.Partitions > MaxGroupPartitions:
		return o, fmt.Errorf("%w: Partitions %d outside 1..%d (0 takes the default, %d)", ErrInvalidArgument, o.Partitions, MaxGroupPartitions, DefaultGroupPartitions)
	case o.LeaseTTL != 0 && o.LeaseTTL < 100*time.Millisecond:
		return o, fmt.Errorf("%w: LeaseTTL %s is under 100ms", ErrInvalidArgument, o.LeaseTTL)
	case o.PageSize < 0, o.PageBytes < 0, o.SafetyPoll < 0, o.RetryDelay < 0, o.CommitInterval < 0, o.Grace < 0:
		return o, fmt.Errorf("%w: negative PageSize, PageBytes, SafetyPoll, RetryDelay, CommitInterval or Grace", ErrInvalidArgument)
	}
	o.Member = cmp.Or(o.Member, DefaultWorkerName())
	if err := validateLocalName("member", o.Member); err != nil {
		return o, err
	}
	o.LeaseTTL = cmp.Or(o.LeaseTTL, DefaultGroupLeaseTTL)
	o.PageSize = cmp.Or(o.PageSize, 256)
	o.PageBytes = cmp.Or(o.PageBytes, DefaultGroupPageBytes)
	o.SafetyPoll = cmp.Or(o.SafetyPoll, 5*time.Second)
	o.RetryDelay = cmp.Or(o.RetryDelay, time.Second)
	o.Grace = cmp.Or(o.Grace, 30*time.Second)
	o.Logger = s.logger(o.Logger)
	return o, nil
}

// GroupMemberStats is one live member of a group, as Group.Stats reports it.
type GroupMemberStats struct {
	Member     string
	JoinedAt   time.Time
	ExpiresAt  time.Time // unless it heartbeats before, it counts as gone
	Partitions []int     // the partitions it owns
	Lag        int64     // its partitions' lags added up
}

// GroupPartitionStats is one partition of a group.
type GroupPartitionStats struct {
	Partition      int
	Owner          string     // "" when free
	Token          int64      // the fencing token of its latest claim
	LeaseExpiresAt *time.Time // nil when free
	Committed      int64      // every event of the partition up to it was handled
	// Lag is how many of the stream's events after Committed belong to the
	// partition: exact while the group's events after its lowest committed
	// offset number fewer than StatsCountLimit, a lower bound after (then
	// GroupStats.LagLowerBound is set).
	Lag int64
}

// GroupStats describes a group: its partition count, live members and
// partitions.
type GroupStats struct {
	Stream, Group string
	Partitions    int
	Members       []GroupMemberStats
	Assignment    []GroupPartitionStats
	Lag           int64 // every partition's lag added up
	// LagLowerBound: the count stopped after the StatsCountLimit events
	// that follow the lowest committed offset, so Lag, and each member's
	// and partition's, is a lower bound, perhaps well below the limit
	// (what other partitions committed in that window is not lag).
	LagLowerBound bool
}

// groupInfo is a row of the groups table.
type groupInfo struct {
	stream, group string
	partitions    int
	createdAt     time.Time
}

// groupMemberRow is a row of the members table.
type groupMemberRow struct {
	member              string
	joinedAt, expiresAt time.Time
}

// groupPartRow is a row of the partitions table.
type groupPartRow struct {
	part      int
	owner     *string
	token     int64
	expiresAt *time.Time
	committed int64
}

// groupRef names a group's rows.
type groupRef struct{ stream, group string }

// groupPartReq claims, releases or commits one partition for member.
type groupPartReq struct {
	groupRef
	member    string
	part      int
	token     int64
	committed int64
	now, exp  time.Time
}

// groupOps: consumer groups (group_pg.go, group_lite.go).
type groupOps interface {
	createGroup(ctx context.Context, g groupRef, partitions int, now time.Time) (int, error) // the stored count
	listGroups(ctx context.Context) ([]groupInfo, error)
	// upsertGroupMember joins (wake: the other members rebalance) or
	// heartbeats; deleteGroupMember and releaseGroupPartition wake the
	// group's members on commit.
	upsertGroupMember(ctx context.Context, g groupRef, member string, now, exp time.Time, wake bool) error
	deleteGroupMember(ctx context.Context, g groupRef, member string) error
	deleteExpiredGroupMembers(ctx context.Context, g groupRef, now time.Time) (int64, error)
	groupMembers(ctx context.Context, g groupRef) ([]groupMemberRow, error)
	groupPartitions(ctx context.Context, g groupRef) ([]groupPartRow, error)
	claimGroupPartition(ctx context.Context, r groupPartReq) (token, committed int64, ok bool, err error)
	renewGroupPartitions(ctx context.Context, g groupRef, member string, exp time.Time) (map[int]int64, error)
	releaseGroupPartition(ctx context.Context, r groupPartReq) (bool, error)
	commitGroupOffset(ctx context.Context, r groupPartReq) (bool, error)
	groupEventKeys(ctx context.Context, stream string, after int64, limit int) ([]Event, error) // Offset and Key only
}

// Stats reports the group's live members, its partitions (owner, lease,
// committed offset) and the lag of each partition and member. ErrNotFound
// when no member ever joined the group.
func (g *Group) Stats(ctx context.Context) (GroupStats, error) {
	return run(g.handle, "group stats", autoRead, func(o target) (GroupStats, error) {
		ref := groupRef{g.st.name, g.group}
		infos, err := o.listGroups(ctx)
		if err != nil {
			return GroupStats{}, err
		}
		i := slices.IndexFunc(infos, func(in groupInfo) bool { return in.stream == ref.stream && in.group == ref.group })
		if i < 0 {
			return GroupStats{}, fmt.Errorf("%w: no such group", ErrNotFound)
		}
		return groupStats(ctx, o, infos[i], g.s.now())
	})
}

// Groups reports every consumer group of every stream, by stream and name,
// as Group.Stats does.
func (s *Store) Groups(ctx context.Context) ([]GroupStats, error) {
	return run(handle{s: s}, "groups", autoRead, func(o target) ([]GroupStats, error) {
		infos, err := o.listGroups(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]GroupStats, 0, len(infos))
		for _, in := range infos {
			st, err := groupStats(ctx, o, in, s.now())
			if err != nil {
				return nil, err
			}
			out = append(out, st)
		}
		return out, nil
	})
}

func groupStats(ctx context.Context, o target, in groupInfo, now time.Time) (GroupStats, error) {
	ref := groupRef{in.stream, in.group}
	gs := GroupStats{Stream: in.stream, Group: in.group, Partitions: in.partitions}
	members, err := o.groupMembers(ctx, ref)
	if err != nil {
		return gs, err
	}
	parts, err := o.groupPartitions(ctx, ref)
	if err != nil {
		return gs, err
	}
	low := int64(-1)
	for _, p := range parts {
		if low < 0 || p.committed < low {
			low = p.committed
		}
	}
	lag := make([]int64, in.partitions)
	if low >= 0 {
		evs, err := o.groupEventKeys(ctx, in.stream, low, StatsCountLimit)
		if err != nil {
			return gs, err
		}
		gs.LagLowerBound = len(evs) >= StatsCountLimit
		committed := make([]int64, in.partitions)
		for _, p := range parts {
			if p.part < in.partitions {
				committed[p.part] = p.committed
			}
		}
		for _, ev := range evs {
			if p := GroupPartition(ev, in.partitions); ev.Offset > committed[p] {
				lag[p]++
			}
		}
	}
	byMember := map[string]*GroupMemberStats{}
	for _, m := range members {
		if !m.expiresAt.After(now) {
			continue
		}
		gs.Members = append(gs.Members, GroupMemberStats{Member: m.member, JoinedAt: m.joinedAt, ExpiresAt: m.expiresAt, Partitions: []int{}})
	}
	for i := range gs.Members {
		byMember[gs.Members[i].Member] = &gs.Members[i]
	}
	for _, p := range parts {
		ps := GroupPartitionStats{Partition: p.part, Token: p.token, LeaseExpiresAt: p.expiresAt, Committed: p.committed}
		if p.part < in.partitions {
			ps.Lag = lag[p.part]
		}
		if p.owner != nil {
			ps.Owner = *p.owner
			if m := byMember[ps.Owner]; m != nil {
				m.Partitions = append(m.Partitions, p.part)
				m.Lag += ps.Lag
			}
		}
		gs.Lag += ps.Lag
		gs.Assignment = append(gs.Assignment, ps)
	}
	return gs, nil
}

// GroupMember is one member of a consumer group: it owns some of the group's
// partitions at a time and delivers their events in offset order (Recv),
// and commits each partition's progress (Commit, CommitTx). Get one from
// Group.Join; Close (or Leave) hands its partitions over at once.
//
// Events of one partition, hence of one key, come in offset order, from one
// member at a time: a member starts on a partition only once its previous
// owner released it or its lease ran out, and reads it from its committed
// offset. Delivery is at least once: an event handled but not committed
// when its partition moves (a crash, a rebalance) is delivered again to the
// next owner. A member never skips an event: it reads the stream through
// the settled horizon, as every receiver does. A read holds at most
// GroupOpts.PageSize events and GroupOpts.PageBytes bytes of them
// (payloads, keys and headers; default 16 MiB): the events past either
// bound come in the next read.
//
// A member is used by one goroutine: Recv, handle the event, Commit or
// CommitTx it, Recv again. Calling Recv means the previous event is
// finished (committed, or left to be delivered again): Recv is where the
// member gives partitions up, so it must not be called while an earlier
// event is still being handled. Its heartbeats run on their own, so a slow
// handler keeps its partitions.
type GroupMember struct {
	g    *Group
	id   string
	opts GroupOpts
	n    int // partitions
	ref  groupRef

	sub       *wake.Sub // the stream's wakes
	gsub      *wake.Sub // the group's
	stopBeats chan struct{}
	beatsDone chan struct{}
	closeOnce sync.Once
	closed    chan struct{}
	onClose   func()

	// The heartbeats' goroutine's: until when the last renewal (or the
	// join) leased the member's row, and the failures of the heartbeats
	// since (how many, the last error): a lease that lapsed meanwhile is
	// theirs, not slow statements'.
	leasedUntil  time.Time
	beatFailures int
	beatErr      error
	// beatFailed is the heartbeats' last failure and when (by the store's
	// clock), for a claim that landed late meanwhile (Recv's goroutine).
	beatFailed atomic.Pointer[beatFailure]
	// beatLocks and claimLocks hear of a heartbeat's or a claim's wait for
	// another connection's lock (SQLite's busy handler; nothing on
	// PostgreSQL): why it landed late.
	beatLocks, claimLocks *litedriver.LockWaitWatch
	// When each warning was last logged, and how many since held back (a
	// lease that lapsed between renewals, a claim that landed after its
	// lease, a failed heartbeat): once a minute at most each, by the
	// store's clock.
	lapseLog, lateClaimLog, beatFailLog logEvery

	stepMu sync.Mutex // held by a step; a leave takes it, so no claim follows the leave
	mu     sync.Mutex
	owned  map[int]*ownedPart
	claims int64 // claims made so far: a heartbeat judges only the partitions claimed before it
	// By partition, the highest offset Recv returned, under any claim (mu).
	handed []int64

	// Recv's state (Recv's goroutine only).
	buf        []Event
	bufThrough int64 // the offset the buffered page reads through
	nextStep   time.Time
	stepNow    atomic.Bool // a heartbeat or a wake asks for a rebalance step
	wakeStep   bool        // a group wake came while busy: step soon
	// held: the last read stopped below committed events at the settled
	// horizon; heldMark is the store's mark before it, run the run of held
	// reads it belongs to, heldHold and heldFirst what run.track said for
	// it, and recheck the last wait since (see heldReport, horizonRelease).
	held      heldReport
	heldMark  heldMark
	run       heldRun
	heldHold  uint64
	heldFirst bool
	recheck   time.Duration
	lastStep  time.Time
	lastIdle  time.Time // when commitIdle last ran
	// pages reads the pages: PageSize events and PageBytes bytes at most.
	pages pager
}

// ownedPart is a partition the member holds.
type ownedPart struct {
	token     int64
	committed int64     // committed offset, as this member last wrote or read it
	inTx      int64     // the highest offset a CommitTx wrote whose transaction has not ended (or adopted: never seen to)
	cursor    int64     // every event of the partition up to it was delivered (or it has none)
	delivered int64     // the last event of the partition delivered
	before    int64     // delivered before the last was handed out: a Redeliver of the last goes back to it
	highest   int64     // the highest offset delivered under this claim: Commit refuses later ones
	from      int64     // the committed offset the claim started from: it delivers only events past it
	handedBy  int64     // the highest offset Recv returned of the partition before this claim
	finished  int64     // the last event Consume finished, committed at the next flush
	deadline  time.Time // the lease, as last renewed
	lost      bool      // a renewal found it gone: Recv drops it
	claim     int64     // which of the member's claims took it
	// retryAt: a failed event comes again then; until then the partition
	// waits. Only the loop of Consume and ConsumeTx sets one (a failed
	// handler's retry), and it hands out nothing of the partition, and
	// commits nothing past the event, before the retry is due: no commit
	// past the event finds a wait pending. Redeliver sets none (and ends
	// one); a new claim starts without.
	retryAt time.Time
	inPage  bool // the buffered page reads on from its cursor: its end moves the cursor
}

// position is how far the partition may be committed: through its cursor
// when every event handed out of it is finished (or committed), through
// the last finished one otherwise. A lost partition's is only what was
// committed or finished (what a handler saw), never its read cursor:
// Recv may have found its lease lapsed in the middle of a page, and a
// leave releases it at its position while its row is still the member's.
func (o *ownedPart) position() int64 {
	done := max(o.committed, o.finished)
	if o.delivered <= done && !o.lost {
		return max(done, o.cursor)
	}
	return done
}

// Join makes a new member of the group, creating the group (with
// opts.Partitions) if it does not exist yet. The member takes its share of
// the partitions from its first Recv on; until then it only counts in the
// others' shares. Close it when done: closing the store closes it.
func (g *Group) Join(ctx context.Context, opts GroupOpts) (*GroupMember, error) {
	return g.join(ctx, opts, false)
}

// join is Join; a loop's member (Consume, ConsumeTx) is not closed by the
// store's shutdown but by its loop, once the event in flight finished and
// committed: the shutdown waits for the loop, and a member closed under a
// running handler would hand its partition (and the key being handled) to
// another member at once.
func (g *Group) join(ctx context.Context, opts GroupOpts, loop bool) (*GroupMember, error) {
	return run(g.handle, "group join", autoWrite(ctx), func(o target) (*GroupMember, error) {
		opts, err := opts.withDefaults(g.s)
		if err != nil {
			return nil, err
		}
		suffix, err := newClaimToken()
		if err != nil {
			return nil, err
		}
		m := &GroupMember{g: g, id: opts.Member + "-" + strconv.FormatInt(suffix%(1<<40), 36), opts: opts,
			ref: groupRef{g.st.name, g.group}, owned: map[int]*ownedPart{}, pages: pager{size: opts.PageSize, bytes: opts.PageBytes},
			stopBeats: make(chan struct{}), beatsDone: make(chan struct{}), closed: make(chan struct{}),
			beatLocks: litedriver.NewLockWaitWatch(), claimLocks: litedriver.NewLockWaitWatch()}
		m.stepNow.Store(true)
		now := g.s.now()
		want := cmp.Or(opts.Partitions, DefaultGroupPartitions)
		n, err := o.createGroup(ctx, m.ref, want, now)
		if err != nil {
			return nil, err
		}
		if opts.Partitions != 0 && n != opts.Partitions {
			return nil, fmt.Errorf("%w: the group has %d partitions, not %d (the count is fixed when the group is created)", ErrInvalidArgument, n, opts.Partitions)
		}
		m.n, m.handed = n, make([]int64, n)
		// Subscribed before the join commits: a release or a publish
		// between the join and the first Recv still wakes it.
		m.sub = g.s.subscribe(streamTopic(g.st.name))
		m.gsub = g.s.subscribe(groupTopic(m.ref.stream, m.ref.group))
		if err := o.upsertGroupMember(ctx, m.ref, m.id, now, now.Add(opts.LeaseTTL), true); err != nil {
			m.sub.Close()
			m.gsub.Close()
			return nil, err
		}
		o.afterCommit(g.s.wake(groupTopic(m.ref.stream, m.ref.group)))
		m.leasedUntil = now.Add(opts.LeaseTTL)
		m.onClose = func() {}
		if !loop {
			key := new(int)
			m.onClose = func() { g.s.bg.remove(key) }
			if !g.s.bg.add(key, m.Close) {
				m.sub.Close()
				m.gsub.Close()
				return nil, ErrClosed
			}
		}
		go m.heartbeats()
		return m, nil
	})
}

// ID is the member's id in the group (GroupMemberStats.Member): its
// GroupOpts.Member and a random suffix.
func (m *GroupMember) ID() string { return m.id }

// Partitions lists the partitions the member holds now, in order.
func (m *GroupMember) Partitions() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int, 0, len(m.owned))
	for p, o := range m.owned {
		if !o.lost {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// PartitionCount is the group's number of partitions.
func (m *GroupMember) PartitionCount() int { return m.n }

// busyStepEvery is how often at most a member steps for wakes of its
// group (on SQLite every commit anywhere is one).
const busyStepEvery = 20 * time.Millisecond

// errMemberClosed is what Recv returns after Close.
var errMemberClosed = fmt.Errorf("%w: the group member left", ErrClosed)

// Recv returns the next event of the member's partitions, waiting for one.
// Between events it rebalances: it releases the partitions beyond its fair
// share (so an event it returned but was not committed goes to their next
// owner again) and claims free or expired ones within it. After Close, or
// once the store closes, it returns an error matching ErrClosed. Database
// errors are returned as they happen; calling Recv again retries.
func (m *GroupMember) Recv(ctx context.Context) (Event, error) {
	for {
		select {
		case <-m.closed:
			return Event{}, opErr("group recv", m.g.name, errMemberClosed)
		case <-m.sub.Done():
			return Event{}, opErr("group recv", m.g.name, ErrClosed)
		default:
		}
		if err := ctx.Err(); err != nil {
			return Event{}, err
		}
		now := m.g.s.now()
		// A busy member never waits, so it looks for the group's wakes here:
		// a join or a leave elsewhere makes it step (at most every
		// busyStepEvery, since on SQLite every commit anywhere wakes it).
		select {
		case <-m.gsub.C():
			m.wakeStep = true
		default:
		}
		if m.wakeStep && now.Sub(m.lastStep) >= busyStepEvery {
			m.stepNow.Store(true)
		}
		if m.stepNow.Load() || !now.Before(m.nextStep) {
			m.wakeStep = false
			if err := m.step(ctx); err != nil {
				m.nextStep = now.Add(min(time.Second, m.opts.LeaseTTL/3))
				m.stepNow.Store(false)
				return Event{}, err
			}
		}
		if ev, ok := m.next(now); ok {
			return ev, nil
		}
		read, err := m.read(ctx)
		if err != nil {
			return Event{}, err
		}
		if read {
			continue
		}
		if err := m.wait(ctx); err != nil {
			return Event{}, err
		}
	}
}

// next pops the next buffered event of a partition the member holds, or
// says the buffer ran out (and moves every partition's cursor past it).
func (m *GroupMember) next(now time.Time) (Event, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.buf) > 0 {
		ev := m.buf[0]
		m.buf = m.buf[1:]
		p := GroupPartition(ev, m.n)
		o := m.owned[p]
		if o == nil || o.lost || !o.inPage || ev.Offset <= o.cursor {
			continue
		}
		if !now.Before(o.deadline) {
			// Its lease ran out without a renewal: another member may own
			// it already. Never hand out an event of it: the next step
			// claims it again (reading it from its committed offset) or
			// leaves it to its new owner. Its cursor stays: the page's
			// end must not move it past the events not handed out.
			o.lost, o.inPage = true, false
			m.stepNow.Store(true)
			continue
		}
		o.before, o.cursor, o.delivered = o.delivered, ev.Offset, ev.Offset
		o.highest = max(o.highest, ev.Offset)
		m.handed[p] = max(m.handed[p], ev.Offset)
		return ev, true
	}
	if m.bufThrough > 0 {
		for _, o := range m.owned {
			// Not one waiting for a retry, nor one claimed since, nor one
			// lost meanwhile (a renewal or a commit found it another's):
			// the page's events of those were not all handed out.
			if o.inPage && !o.lost {
				o.cursor = max(o.cursor, m.bufThrough)
			}
		}
		m.bufThrough = 0
	}
	return Event{}, false
}

// read reads the next page of the stream after the lowest cursor of the
// member's partitions; false when there was nothing to read.
func (m *GroupMember) read(ctx context.Context) (bool, error) {
	m.held.held, m.heldMark = false, m.g.s.held.mark()
	now := m.g.s.now()
	m.mu.Lock()
	from := int64(-1)
	for _, o := range m.owned {
		// A partition waiting to retry a failed event is left out: the
		// others go on meanwhile.
		o.inPage = !o.lost && !now.Before(o.retryAt)
		if o.inPage && (from < 0 || o.cursor < from) {
			from = o.cursor
		}
	}
	m.mu.Unlock()
	if from < 0 {
		return false, nil
	}
	// The page is cut at PageSize events and PageBytes bytes (see pager).
	evs, _, err := m.pages.read(context.WithValue(ctx, heldKey{}, &m.held), m.g.st, from)
	if err != nil {
		m.run.track(m.heldMark, false, false)
		return false, err
	}
	if len(evs) == 0 { // the member waits next: with the run's hold when held
		m.heldHold, m.heldFirst = m.run.track(m.heldMark, m.held.held, false)
		return false, nil
	}
	m.run.track(m.heldMark, false, false) // the horizon moved: the next held read begins a run
	m.mu.Lock()
	m.buf, m.bufThrough = evs, evs[len(evs)-1].Offset
	m.mu.Unlock()
	return true, nil
}

// wait sleeps until a wake (a publish on the stream, a change in the group),
// the next step or the safety poll; after a read the settled horizon held
// back, until a short backoff or the end of a Tx of the store, as a
// receiver does (see heldReport).
func (m *GroupMember) wait(ctx context.Context) error {
	now := m.g.s.now()
	d := min(m.opts.SafetyPoll, max(m.nextStep.Sub(now), time.Millisecond))
	var released <-chan struct{}
	var recheck <-chan time.Time // a read, not a step, is due
	if m.held.held {
		m.recheck = nextRecheck(m.recheck)
		rt := time.NewTimer(m.recheck)
		defer rt.Stop()
		recheck, released = rt.C, m.g.s.held.after(m.heldMark, m.heldHold, m.heldFirst)
		wake.HeldWaits(streamTopic(m.g.st.name))
	} else {
		m.recheck = 0
	}
	m.mu.Lock()
	for _, o := range m.owned {
		if !o.lost && now.Before(o.retryAt) {
			d = min(d, max(o.retryAt.Sub(now), time.Millisecond))
		}
	}
	m.mu.Unlock()
	if m.wakeStep { // a wake seen while busy, whose step is still due
		d = min(d, max(busyStepEvery-now.Sub(m.lastStep), time.Millisecond))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-m.closed:
	case <-m.sub.Done():
	case <-m.sub.C():
	case <-recheck:
	case <-released:
	case <-m.gsub.C():
		// Stepped at most every busyStepEvery: on SQLite every commit
		// anywhere wakes every member.
		m.wakeStep = true
	case <-t.C:
		m.stepNow.Store(true)
	}
	if isClosed(released) { // for tests: see wake.CountHeld
		wake.HeldReleased(streamTopic(m.g.st.name))
	}
	return nil
}

// step rebalances once: it reads the live members and the partitions,
// drops the partitions it lost, releases those beyond its share and claims
// free or expired ones within it.
func (m *GroupMember) step(ctx context.Context) error {
	m.stepMu.Lock()
	defer m.stepMu.Unlock()
	select {
	case <-m.closed: // left: claim nothing more
		return opErr("group recv", m.g.name, errMemberClosed)
	default:
	}
	s := m.g.s
	m.stepNow.Store(false)
	now := s.now()
	defer func() { m.lastStep = now }()
	type view struct {
		members []groupMemberRow
		parts   []groupPartRow
	}
	v, err := run(m.g.handle, "group rebalance", autoRead, func(o target) (view, error) {
		members, err := o.groupMembers(ctx, m.ref)
		if err != nil {
			return view{}, err
		}
		parts, err := o.groupPartitions(ctx, m.ref)
		return view{members, parts}, err
	})
	if err != nil {
		return err
	}
	live := []string{}
	expired := false
	for _, mr := range v.members {
		if mr.expiresAt.After(now) || mr.member == m.id {
			live = append(live, mr.member)
		} else {
			expired = true
		}
	}
	if !slices.Contains(live, m.id) {
		live = append(live, m.id)
		slices.Sort(live)
	}
	// The share: partitions / members, the first (in id order) members
	// taking one more each while partitions remain.
	i := slices.Index(live, m.id)
	quota := m.n / len(live)
	if i < m.n%len(live) {
		quota++
	}
	// Drop what was lost (someone else holds it, or the lease ran out).
	m.mu.Lock()
	changed := false
	for _, r := range v.parts {
		o := m.owned[r.part]
		if o == nil {
			continue
		}
		if o.lost || r.owner == nil || *r.owner != m.id || r.token != o.token || !now.Before(o.deadline) {
			delete(m.owned, r.part)
			changed = true
		}
	}
	held := make([]int, 0, len(m.owned))
	for p := range m.owned {
		held = append(held, p)
	}
	m.mu.Unlock()
	slices.Sort(held)
	wakeOthers := false
	var next time.Time
	// Release the partitions beyond the share, highest first.
	var released []int // (the view still shows them the member's)
	for len(held) > quota {
		p := held[len(held)-1]
		held = held[:len(held)-1]
		m.mu.Lock()
		o := m.owned[p]
		delete(m.owned, p)
		m.mu.Unlock()
		changed = true
		if err := m.release(ctx, p, o); err != nil {
			return err
		}
		released = append(released, p)
		wakeOthers = true
	}
	// Claim within the share: first the partitions whose rows are still
	// the member's own though it no longer holds them, then free or
	// expired ones. A row stays the member's own after it dropped the
	// partition: its lease lapsed in the member's view (a late renewal, a
	// slow step: statements slow next to LeaseTTL) while its heartbeat,
	// which renews every row it owns, renewed the row. Such a row is no
	// one else's to claim while the heartbeats go on: the member claims
	// it again (a new token, from the committed offset) or releases it.
	// Before, it waited for the row's lease like anyone's, which its own
	// heartbeats renewed for ever: a lone member under load never handed
	// out an event again (TestGroupMemberReclaimsWhatItsHeartbeatRenewed).
	mine := m.owns
	order := make([]groupPartRow, 0, len(v.parts))
	for _, r := range v.parts {
		if mine(r) {
			order = append(order, r)
		}
	}
	for _, r := range v.parts {
		if !mine(r) {
			order = append(order, r)
		}
	}
	for _, r := range order {
		if len(held) >= quota || m.isClosed() {
			break // a leave waits for the step: it releases what the step claimed
		}
		if slices.Contains(held, r.part) || r.part >= m.n {
			continue
		}
		if !mine(r) && r.owner != nil && r.expiresAt != nil && r.expiresAt.After(now) {
			if next.IsZero() || r.expiresAt.Before(next) {
				next = *r.expiresAt
			}
			continue
		}
		// Each claim's lease from its own time, not the step's: a step of
		// many claims under load took longer than a short lease.
		cnow := s.now()
		exp := cnow.Add(m.opts.LeaseTTL)
		m.claimLocks.Drain()
		cctx := litedriver.WithLockWaitWatch(ctx, m.claimLocks)
		res, err := run(m.g.handle, "group claim", autoWrite(cctx), func(o target) (ownedPart, error) {
			token, committed, ok, err := o.claimGroupPartition(cctx, groupPartReq{groupRef: m.ref, member: m.id, part: r.part, now: cnow, exp: exp})
			if err != nil || !ok {
				return ownedPart{}, err
			}
			return ownedPart{token: token, committed: committed, cursor: committed, delivered: committed, highest: committed, deadline: exp}, nil
		})
		if err != nil {
			return err
		}
		if res.token == 0 {
			continue // someone else was first
		}
		m.reportLateClaim(r.part, cnow, exp, waited(m.claimLocks))
		m.mu.Lock()
		m.claims++
		res.claim, res.from, res.handedBy = m.claims, res.committed, m.handed[r.part]
		m.owned[r.part] = &res
		m.mu.Unlock()
		held = append(held, r.part)
		changed = true
	}
	// The member's own rows beyond its share (or once it left) go back, at
	// their committed offsets: kept, its heartbeats would renew them for
	// ever and no other member could claim them.
	for _, r := range v.parts {
		if !mine(r) || slices.Contains(released, r.part) {
			continue
		}
		m.mu.Lock()
		_, holds := m.owned[r.part]
		m.mu.Unlock()
		if holds {
			continue
		}
		if err := m.release(ctx, r.part, atCommitted(r)); err != nil {
			return err
		}
		wakeOthers = true
	}
	// Commit how far idle partitions were read, so that their next owner
	// does not read the stream from far back: once per heartbeat period
	// (on SQLite every commit wakes every member, and a step on each must
	// not write).
	if now.Sub(m.lastIdle) >= m.opts.LeaseTTL/3 {
		m.lastIdle = now
		if err := m.commitIdle(ctx, now); err != nil {
			return err
		}
	}
	// Rows of members whose lease ran out (crashed) go, so Stats and the
	// others' views stop listing them.
	if expired {
		if err := run0(m.g.handle, "group rebalance", autoWrite(ctx), func(o target) error {
			_, err := o.deleteExpiredGroupMembers(ctx, m.ref, now)
			return err
		}); err != nil {
			return err
		}
	}
	if changed {
		m.mu.Lock()
		m.buf, m.bufThrough = nil, 0 // read again from the new partitions' cursors
		m.mu.Unlock()
	}
	if wakeOthers {
		s.wake(groupTopic(m.ref.stream, m.ref.group))()
	}
	m.nextStep = now.Add(m.opts.LeaseTTL / 3)
	if !next.IsZero() && next.Before(m.nextStep) {
		m.nextStep = next
	}
	return nil
}

// release gives partition p up, committing how far it was read when every
// event handed out of it was committed.
func (m *GroupMember) release(ctx context.Context, p int, o *ownedPart) error {
	committed := o.position()
	now := m.g.s.now()
	return run0(m.g.handle, "group release", autoWrite(ctx), func(t target) error {
		topic := groupTopic(m.ref.stream, m.ref.group)
		_, err := t.releaseGroupPartition(ctx, groupPartReq{groupRef: m.ref, member: m.id, part: p, token: o.token,
			committed: committed, now: now})
		if err == nil {
			t.afterCommit(m.g.s.wake(topic))
		}
		return err
	})
}

// commitIdle commits the positions of the partitions that moved past their
// committed offset: the events Consume finished since its last flush, and
// the cursors of partitions with nothing outstanding (no events of theirs
// among those read since).
func (m *GroupMember) commitIdle(ctx context.Context, now time.Time) error {
	type idle struct {
		p         int
		token, at int64
	}
	var todo []idle
	m.mu.Lock()
	for p, o := range m.owned {
		if at := o.position(); !o.lost && at > o.committed {
			todo = append(todo, idle{p, o.token, at})
		}
	}
	m.mu.Unlock()
	for _, it := range todo {
		ok, err := m.commit(ctx, autoWrite(ctx), it.p, it.token, it.at, now)
		if err != nil {
			return err
		}
		if ok {
			m.mu.Lock()
			if o := m.owned[it.p]; o != nil && o.token == it.token {
				o.committed = max(o.committed, it.at)
				o.deadline = maxTime(o.deadline, now.Add(m.opts.LeaseTTL))
			}
			m.mu.Unlock()
		}
	}
	return nil
}

// commit writes offset as partition p's committed offset, fenced by the
// claim's token (another member's claim since makes it fail), and renews
// the partition's lease: a heartbeat that could not run (a handler's
// transaction held SQLite's writer, or a pool's only connection) lapses no
// lease that nobody claimed yet.
func (m *GroupMember) commit(ctx context.Context, v via, p int, token, offset int64, now time.Time) (bool, error) {
	return run(m.g.handle, "group commit", v, func(o target) (bool, error) {
		return o.commitGroupOffset(ctx, groupPartReq{groupRef: m.ref, member: m.id, part: p, token: token, committed: offset,
			now: now, exp: now.Add(m.opts.LeaseTTL)})
	})
}

// Commit records that ev, and every earlier event of its partition, was
// handled. It fails with ErrClaimLost when the member no longer holds ev's
// partition under the claim it delivered ev in (another member claimed it
// since, after the member released it or its lease ran out; or the member
// claimed it again, reading it from its committed offset): ev will be
// delivered again to the partition's owner, unless it was committed since
// (one delivered under an earlier claim and at or below the offset the
// member's current claim started from fails the same way: accepting it
// would let a CommitTx commit its effects twice); and with
// ErrInvalidArgument for an event this member did not deliver (of another
// stream, at offset 0 or below, later than any its Recv returned of the
// partition, before any Recv too, or one its current claim started past
// that no earlier claim of the member delivered). A lease
// that ran out with no one claiming the partition does not fence: no one
// else handled its events meanwhile (on SQLite a long ConsumeTx handler
// holds the writer slot its heartbeats wait for), and the commit renews
// it.
func (m *GroupMember) Commit(ctx context.Context, ev Event) error {
	return m.commitEvent(ctx, autoWrite(ctx), ev, nil)
}

// CommitTx is Commit inside tx, so the effects ev had and the group's
// progress commit together or not at all: exactly-once effects. On
// ErrClaimLost the caller must roll tx back (its effects are the next
// owner's to make). The partition's row stays locked until tx ends, so a
// member claiming it meanwhile waits for the outcome. When tx rolls back
// (the handler failed after CommitTx, or the commit failed), the member
// hands ev's partition out again from its committed offset at the next
// Recv: ev comes again, before any later event of its partition. So it
// does when tx rolls back to a savepoint made before CommitTx (through
// Tx.Exec; on SQLite a failed WorkTx or RunJobTx handler's transaction
// rolls back to the store's savepoint before the handler), at once: tx
// goes on, and its commit no longer moves the member past ev; the member
// goes back only to what tx still commits of the partition (a CommitTx
// of it made before the savepoint, or again since). (An
// adopted transaction, AdoptPgx or AdoptSQL, does not tell the member of
// its rollback: the partition then goes on after ev.)
func (m *GroupMember) CommitTx(ctx context.Context, tx Tx, ev Event) error {
	return m.commitEvent(ctx, tx.via(ctx), ev, &tx)
}

func (m *GroupMember) commitEvent(ctx context.Context, v via, ev Event, tx *Tx) error {
	if ev.Stream != m.ref.stream {
		return opErr("group commit", m.g.name, fmt.Errorf("%w: event %d is of stream %q, not of the group's", ErrInvalidArgument, ev.Offset, ev.Stream))
	}
	p := GroupPartition(ev, m.n)
	m.mu.Lock()
	token, err := m.deliveredIn(p, ev)
	m.mu.Unlock()
	if err != nil {
		return opErr("group commit", m.g.name, err)
	}
	now := m.g.s.now()
	ok, err := m.commit(ctx, v, p, token, ev.Offset, now)
	if err != nil {
		return err
	}
	if !ok {
		m.mu.Lock()
		if o := m.owned[p]; o != nil && o.token == token {
			o.lost = true
			m.stepNow.Store(true)
		}
		m.mu.Unlock()
		return opErr("group commit", m.g.name, fmt.Errorf("%w: partition %d was claimed by another member", ErrClaimLost, p))
	}
	done := func() {
		m.mu.Lock()
		if o := m.owned[p]; o != nil && o.token == token {
			o.committed = max(o.committed, ev.Offset)
			o.deadline = maxTime(o.deadline, now.Add(m.opts.LeaseTTL))
			o.goesOnAfter(ev.Offset)
		}
		m.mu.Unlock()
	}
	if tx == nil || tx.adopted() {
		// An adopted transaction's end is never seen: the member takes the
		// commit as made (as its doc says, the partition goes on after ev),
		// so a later CommitTx that rolls back rewinds no further than ev
		// and Redeliver refuses it.
		done()
		return nil
	}
	var before int64 // what tx committed of p before this CommitTx: its rollback goes back there
	m.mu.Lock()
	if o := m.owned[p]; o != nil && o.token == token {
		before = o.pending()
		o.inTx = max(o.inTx, ev.Offset) // Redeliver refuses it from now on
		o.goesOnAfter(ev.Offset)        // made again after a rollback to a savepoint: not handed out again
	}
	m.mu.Unlock()
	tx.onCommit(done)
	tx.onRollback(func() { m.rewind(p, token, before) })
	return nil
}

// rewind hands partition p out again after offset to, once a CommitTx of
// it rolled back (with its transaction, or to a savepoint made before it):
// to is what the transaction committed of p before that CommitTx, which
// is still in it after a ROLLBACK TO (a CommitTx before the savepoint);
// its committed offset after a rollback of the whole transaction. The
// rollback actions a ROLLBACK TO (or a rollback) runs are those of the
// CommitTx calls since the savepoint, oldest first: the oldest's to is
// what the transaction still commits, and the later ones' (higher)
// changes nothing.
func (m *GroupMember) rewind(p int, token, to int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.owned[p]
	if o == nil || o.lost || o.token != token {
		return
	}
	// Never below what committed meanwhile: a Rollback frees the
	// partition's row before its actions run, so another transaction's
	// CommitTx of a later event may have committed first (review58b F1;
	// only reachable with the member on two goroutines, which its doc
	// forbids).
	to = max(min(to, o.pending()), o.committed)
	o.cursor, o.delivered, o.finished = to, to, o.committed
	o.inPage, o.inTx = false, to
}

// pending is how far the partition is committed once the open transaction
// with CommitTx calls of it (the row lock makes it one at most) commits:
// its committed offset when there is none.
func (o *ownedPart) pending() int64 { return max(o.committed, o.inTx) }

// goesOnAfter moves the partition past offset, committed or committed in
// an open transaction, when a rollback (to a savepoint) or Redeliver left
// it before: its next event is the one after. Not finished: a release
// commits the partition's position, which must not include a CommitTx
// whose transaction may still roll back.
func (o *ownedPart) goesOnAfter(offset int64) {
	if o.cursor < offset {
		o.cursor, o.delivered = offset, offset
	}
}

// heartbeats renew the member's row and its partitions' leases every third
// of the lease until Close (not until the store begins to shut down: a
// Consume member's handler in flight keeps its partitions through the
// shutdown's Grace; the shutdown closes the other members).
func (m *GroupMember) heartbeats() {
	defer close(m.beatsDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-m.stopBeats
		cancel()
	}()
	ctx = litedriver.WithLockWaitWatch(ctx, m.beatLocks)
	t := time.NewTicker(m.opts.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := m.heartbeat(ctx)
		if errors.Is(err, ErrClosed) {
			return // the store closed (a loop that ignored the hard stop)
		}
		if err != nil && ctx.Err() == nil {
			m.beatFailures++
			m.beatErr = err
			m.beatFailed.Store(&beatFailure{err: err, at: m.g.s.now()})
			m.reportBeatFailed(err)
		}
	}
}

func (m *GroupMember) heartbeat(ctx context.Context) error {
	m.mu.Lock()
	before := m.claims // a partition claimed after this may be missing from the renewal
	m.mu.Unlock()
	now := m.g.s.now()
	exp := now.Add(m.opts.LeaseTTL)
	m.beatLocks.Drain()
	tokens, err := run(m.g.handle, "group heartbeat", autoWrite(ctx), func(o target) (map[int]int64, error) {
		if err := o.upsertGroupMember(ctx, m.ref, m.id, now, exp, false); err != nil {
			return nil, err
		}
		return o.renewGroupPartitions(ctx, m.ref, m.id, exp)
	})
	if err != nil {
		return err
	}
	m.reportLapse(exp, lateCause{failures: m.beatFailures, err: m.beatErr, lockWait: waited(m.beatLocks)})
	m.beatFailures, m.beatErr = 0, nil
	m.mu.Lock()
	defer m.mu.Unlock()
	for p, o := range m.owned {
		switch tok, ok := tokens[p]; {
		case ok && tok == o.token:
			o.deadline = exp
		case o.claim <= before:
			o.lost = true
			m.stepNow.Store(true)
		}
	}
	return nil
}

// owns reports whether r is the member's row, held or not.
func (m *GroupMember) owns(r groupPartRow) bool { return r.owner != nil && *r.owner == m.id }

// atCommitted is a row of the member's own that it does not hold, as a
// partition to release at the row's committed offset under its token.
func atCommitted(r groupPartRow) *ownedPart {
	return &ownedPart{token: r.token, committed: r.committed, cursor: r.committed, delivered: r.committed}
}

// lapseWarnEvery bounds how often a member reports its leases lapsing, a
// claim landing late, or its heartbeat failing: each kind of line once
// this long at most, per member.
const lapseWarnEvery = time.Minute

// logEvery rate-limits one kind of a member's log line: one every
// lapseWarnEvery at most, by the store's clock, counting the ones held
// back. A clock that went back lets the next line through.
type logEvery struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// allow reports whether a line may be logged at now, and how many were
// held back since the last one logged (to say in it).
func (l *logEvery) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := now.Sub(l.last); !l.last.IsZero() && d >= 0 && d < lapseWarnEvery {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return true, n
}

// reportBeatFailed logs a failed heartbeat, once a minute at most: a
// database that is down fails every beat of every member, and each line
// after the first says how many failures it held back ("suppressed").
// The member goes on beating; its leases lapse if the failures outlast
// them (then its partitions move, and it claims its share again).
func (m *GroupMember) reportBeatFailed(err error) {
	ok, suppressed := m.beatFailLog.allow(m.g.s.now())
	if !ok {
		return
	}
	m.opts.Logger.Warn("alkstore: group member heartbeat failed", "group", m.g.name, "member", m.id, "error", err,
		"suppressed", suppressed)
}

// reportLateClaim warns when a claim of partition p (made at start,
// leasing it until exp; lockWait: it waited for another connection's
// lock) landed after that lease ran out: the claim holds
// nothing, the member hands out none of the partition's events, and its
// next step drops the partition and claims it again. Its cause is said as
// reportLapse says a renewal's: the claim waited for another connection's
// lock, or the heartbeats failed while it ran (the database was down),
// else statements slow next to LeaseTTL; a member whose every claim lands
// late never hands out an event. Rate-limited as reportLapse.
func (m *GroupMember) reportLateClaim(p int, start, exp time.Time, lockWait bool) {
	landed := m.g.s.now()
	if landed.Before(exp) {
		return
	}
	ok, suppressed := m.lateClaimLog.allow(landed)
	if !ok {
		return
	}
	cause := lateCause{lockWait: lockWait}
	if f := m.beatFailed.Load(); f != nil && !f.at.Before(start) {
		cause.err = f.err
	}
	m.opts.Logger.Warn("alkstore: group member's claim landed after its lease ran out; "+cause.advice(),
		append([]any{"group", m.g.name, "member", m.id, "partition", p, "late", landed.Sub(exp), "lease", m.opts.LeaseTTL,
			"suppressed", suppressed}, cause.attrs()...)...)
}

// beatFailure is a heartbeat's failure and when it came.
type beatFailure struct {
	err error
	at  time.Time
}

// lateCause is why a member's renewal or claim landed after its lease:
// its heartbeats failed meanwhile (failures of them, the last err), or it
// waited for another connection's lock (lockWait); neither, its
// statements succeeded and were slow.
type lateCause struct {
	failures int
	err      error
	lockWait bool
}

// advice ends the warning: what happened, and raising LeaseTTL only when
// it helps (statements that succeeded, slowly). A database that was down
// or locked longer than the lease is not fixed by a longer lease.
func (c lateCause) advice() string {
	switch {
	case c.err != nil:
		return "heartbeats failed meanwhile: the database was unreachable or locked (see error), not slow"
	case c.lockWait:
		return "it waited for another connection's lock: the database is locked (SQLite's write lock, held by another process's or handle's transaction), not slow"
	default:
		return "statements are slow next to LeaseTTL (raise it)"
	}
}

// attrs are the cause's log attributes: the last failure, and how many
// heartbeats failed when they are counted.
func (c lateCause) attrs() []any {
	switch {
	case c.err == nil:
		return nil
	case c.failures == 0:
		return []any{"error", c.err}
	}
	return []any{"error", c.err, "failed", c.failures}
}

// waited reports whether a statement watched by lw waited for another
// connection's lock since lw was last drained.
func waited(lw *litedriver.LockWaitWatch) bool {
	select {
	case <-lw.C():
		return true
	default:
		return false
	}
}

// reportLapse warns when a renewal (leasing until exp) landed after the
// previous one's lease ran out, or itself ran out on the way: the member's
// row and partitions were free for others to take meanwhile, and the
// member stops handing out their events until it claims them again (a
// new token, reading from the committed offset). That happens when
// statements are slow next to LeaseTTL (a loaded machine or database, a
// pool too small for the heartbeats beside the handlers): the member
// still makes progress, but its partitions may move and events be
// handled again; a longer LeaseTTL fixes it. It happens too when the
// database was down or locked longer than the lease (the heartbeats
// failed, or waited for another process's lock): cause says so, naming
// the last failure, and a longer lease would not fix it.
func (m *GroupMember) reportLapse(exp time.Time, cause lateCause) {
	landed := m.g.s.now()
	lapsed := landed.Sub(m.leasedUntil)
	if landed.After(exp) {
		lapsed = max(lapsed, landed.Sub(exp))
	}
	m.leasedUntil = exp
	if lapsed <= 0 {
		return
	}
	ok, suppressed := m.lapseLog.allow(landed)
	if !ok {
		return
	}
	m.opts.Logger.Warn("alkstore: group member's lease lapsed between heartbeats; "+cause.advice(),
		append([]any{"group", m.g.name, "member", m.id, "lapsed", lapsed, "lease", m.opts.LeaseTTL, "suppressed", suppressed},
			cause.attrs()...)...)
}

func (m *GroupMember) isClosed() bool {
	select {
	case <-m.closed:
		return true
	default:
		return false
	}
}

// Close leaves the group gracefully: it releases the member's partitions
// (committing how far their idle ones were read) and deletes its row, and
// the wake makes the other members take the partitions at once. Events
// handed out but not committed go to the partitions' next owners. Close
// always returns nil (see Leave for the leave's error). It waits as long
// as the leave takes: called while a transaction holding a CommitTx of one
// of the member's partitions is still open, it waits for that transaction
// (on the same goroutine, for ever); Leave with a context bounds the wait.
func (m *GroupMember) Close() error {
	_ = m.Leave(m.g.s.life.settleCtx(context.Background())) // a hard stop gives it up (giveUpSettles)
	return nil
}

// Leave is Close bounded by ctx, returning why the leave could not be
// written (the partitions then go to the others when their leases run
// out). Recv returns ErrClosed after it.
func (m *GroupMember) Leave(ctx context.Context) error {
	var err error
	m.closeOnce.Do(func() {
		close(m.closed)
		close(m.stopBeats)
		<-m.beatsDone
		err = m.leave(ctx)
		m.sub.Close()
		m.gsub.Close()
		m.onClose()
	})
	return err
}

func (m *GroupMember) leave(ctx context.Context) error {
	// A step in flight (Recv on another goroutine) stops claiming at once;
	// its claims are released here.
	m.stepMu.Lock()
	defer m.stepMu.Unlock()
	m.mu.Lock()
	owned := m.owned
	m.owned = map[int]*ownedPart{}
	m.mu.Unlock()
	var errs []error
	for p, o := range owned {
		if !o.lost {
			errs = append(errs, m.release(ctx, p, o))
		}
	}
	// Rows still the member's that it does not hold (a step that failed
	// between dropping a partition and claiming or releasing it, as when
	// Recv's ctx ends mid-rebalance; one marked lost after a renewal the
	// member never heard of) go back too, each fenced by its token: else
	// the others wait a lease for them after a Leave that returned nil.
	parts, err := run(m.g.handle, "group leave", autoRead, func(t target) ([]groupPartRow, error) {
		return t.groupPartitions(ctx, m.ref)
	})
	errs = append(errs, err)
	for _, r := range parts {
		if !m.owns(r) {
			continue
		}
		o := owned[r.part]
		switch {
		case o != nil && !o.lost && o.token == r.token:
			continue // released above
		case o == nil || o.token != r.token:
			o = atCommitted(r)
		}
		errs = append(errs, m.release(ctx, r.part, o))
	}
	errs = append(errs, run0(m.g.handle, "group leave", autoWrite(ctx), func(o target) error {
		topic := groupTopic(m.ref.stream, m.ref.group)
		err := o.deleteGroupMember(ctx, m.ref, m.id)
		if err == nil {
			o.afterCommit(m.g.s.wake(topic))
		}
		return err
	}))
	return errors.Join(errs...)
}

// CheckOpts reports, without I/O, why Join, Consume or ConsumeTx would
// refuse the group (its stream's or its own name) or opts: an error
// matching ErrInvalidName or ErrInvalidArgument, wrapped with the group.
// A partition count that differs from the stored one shows only at Join.
func (g *Group) CheckOpts(opts GroupOpts) error {
	return run0(g.handle, "group check", func(s *Store) (target, error) { return target{}, s.check() }, func(target) error {
		_, err := opts.withDefaults(g.s)
		return err
	})
}

// CheckTxOpts is CheckOpts for ConsumeTx (client.HandleGroupTx checks it at
// registration): it also refuses, with ErrInvalidArgument, a PostgreSQL
// pool of one connection, which the member's transaction would hold whole
// while its handler runs, leaving none for the heartbeats that renew its
// partitions' leases (WorkTx refuses it likewise).
func (g *Group) CheckTxOpts(opts GroupOpts) error {
	return run0(g.handle, "group check", func(s *Store) (target, error) { return target{}, s.check() }, func(target) error {
		if _, err := opts.withDefaults(g.s); err != nil {
			return err
		}
		return g.s.checkTxPool()
	})
}

// GroupHandler handles one event of a group member's partitions. Returning
// nil commits the event (Commit); an error leaves it uncommitted and hands
// it to the handler again after GroupOpts.RetryDelay (a stream's events are
// never skipped: a partition waits for its failing event). A panic counts
// as an error, and so does runtime.Goexit (t.FailNow called from a
// handler): the loop goes on with another goroutine. A commit that fails
// after the handler returned nil (the database refused it, or the claim
// was lost) is not the handler's failure: Consume logs it ("could not
// commit") and goes on without running the handler for the event again;
// the next commit of the partition (the next event's, the next flush, a
// release) commits it, or, should the partition move first, its next owner
// handles it again.
type GroupHandler func(ctx context.Context, ev Event) error

// GroupTxHandler handles one event inside a transaction that Consume
// begins: what it writes through tx commits together with the group's
// offset (CommitTx), or not at all, so each event's effects commit exactly
// once. An error (or a panic, or a runtime.Goexit) rolls tx back, and the
// event comes again after GroupOpts.RetryDelay. A lost claim rolls tx back
// too: the partition's new owner makes the effects. The handler must not
// end tx.
type GroupTxHandler func(ctx context.Context, tx Tx, ev Event) error

// Consume joins the group and runs handler on every event of the member's
// partitions, one at a time in offset order, committing each after it,
// until ctx is cancelled or the store shuts down; then it lets the event in
// flight finish and commit within GroupOpts.Grace (then its handler's
// context is cancelled, and at once on a store's hard stop) and leaves the
// group gracefully (its partitions go to the other members at once). A
// handler that ignores its cancelled context is waited for 5 seconds, then
// left behind: Consume leaves the group without it, its event uncommitted
// (the partition's next owner handles it), and what it returns later
// commits nothing; ConsumeTx rolls its transaction back then (on SQLite
// that frees the writer, keeping the claims of the store's jobs that
// waited for it). It returns nil after ctx was cancelled and an error
// matching ErrClosed when the store's shutdown stopped it; other errors
// are bad options.
func (g *Group) Consume(ctx context.Context, opts GroupOpts, handler GroupHandler) error {
	if handler == nil {
		return opErr("group consume", g.name, fmt.Errorf("%w: nil handler", ErrInvalidArgument))
	}
	var flushed time.Time
	return g.consume(ctx, opts, func(ctx context.Context, m *GroupMember, ev Event, run *groupRun) error {
		if err := run.call.run(func() error { return handler(ctx, ev) }); err != nil {
			return err
		}
		if run.left.Load() {
			return nil // the loop left the handler behind, and the member left: ev goes to the partition's next owner
		}
		// ev was handled: whatever its commit does, the handler is done
		// with it. A failed commit is logged as one and not retried as a
		// handler's failure (which ran the handler again for ev); the next
		// flush, step or release commits ev (finished), or the partition's
		// next owner handles it again (at least once).
		m.finish(ev)
		var err error
		if m.opts.CommitInterval == 0 {
			err = m.Commit(ctx, ev)
		} else if now := g.s.now(); now.Sub(flushed) >= m.opts.CommitInterval || m.buffered() == 0 {
			flushed = now
			err = m.commitIdle(ctx, now)
		}
		if err != nil {
			m.opts.Logger.Warn("alkstore: group member could not commit; the handled events are committed at the next flush, or handled again by the partition's next owner",
				"group", g.name, "member", m.id, "offset", ev.Offset, "error", err)
		}
		return nil
	})
}

// ConsumeTx is Consume for a transactional handler: each event's handler
// runs in a transaction, and the group's offset commits in it (CommitTx),
// so an event's effects and the group's progress commit together.
// On SQLite the transaction holds the writer slot while the handler runs.
// On PostgreSQL it holds a pooled connection, and it counts against the
// same bound as WorkTx's (see Store.handlerTxSlots): the member waits for
// one of those transactions before it begins its own, its partitions'
// leases renewed meanwhile as while its handler runs.
func (g *Group) ConsumeTx(ctx context.Context, opts GroupOpts, handler GroupTxHandler) error {
	if handler == nil {
		return opErr("group consume", g.name, fmt.Errorf("%w: nil handler", ErrInvalidArgument))
	}
	if err := g.CheckTxOpts(opts); err != nil {
		return err
	}
	return g.consume(ctx, opts, func(ctx context.Context, m *GroupMember, ev Event, run *groupRun) error {
		return g.s.inHandlerTx(ctx, &run.call, func(ctx context.Context, tx Tx) error {
			if err := run.began(tx); err != nil {
				return err
			}
			if err := run.call.run(func() error { return handler(ctx, tx, ev) }); err != nil {
				return err
			}
			return m.CommitTx(ctx, tx, ev)
		})
	})
}

func (g *Group) consume(ctx context.Context, opts GroupOpts, handle func(ctx context.Context, m *GroupMember, ev Event, run *groupRun) error) error {
	if g.s == nil {
		return opErr("group consume", g.name, errNoStore)
	}
	if _, err := opts.withDefaults(g.s); err != nil {
		return opErr("group consume", g.name, err)
	}
	err := g.s.RunLoop(ctx, "group "+g.name, func(ctx context.Context) error {
		m, err := g.join(ctx, opts, true)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		defer func() { _ = m.Leave(g.s.life.settleCtx(ctx)) }()
		// The handlers' context: ctx's values, not its cancel, which
		// only starts the Grace.
		hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
		defer hcancel()
		go func() {
			select {
			case <-hctx.Done():
				return
			case <-g.s.life.hard:
			case <-opts.HardStop:
			case <-ctx.Done():
				t := time.NewTimer(m.opts.Grace)
				defer t.Stop()
				select {
				case <-hctx.Done():
				case <-t.C:
				case <-g.s.life.hard:
				case <-opts.HardStop:
				}
			}
			hcancel()
		}()
		run := &groupRun{}
		events := make(chan error, 1)
		// A handler's panic is its error (handlerCall, in Consume and
		// ConsumeTx); one of the loop's own code here (a store bug) is
		// recovered by nobody and ends the process, as one in Work's
		// handler goroutines does.
		go g.consumeEvents(ctx, hctx, m, run, handle, events)
		return g.awaitEvents(hctx, m, run, events)
	})
	// The loop's own failures (a join's) carry their operation and name
	// already: one "alkstore:" prefix, not the loop's around the join's.
	var loopErr, inner *OpError
	if errors.As(err, &loopErr) && loopErr.Op == "run loop" && errors.As(loopErr.Err, &inner) {
		return inner
	}
	return err
}

// consumeEvents is the loop of Consume and ConsumeTx: it receives m's
// events and hands each to handle with hctx, until ctx ends or the
// member closes, on a goroutine of its own, which the loop leaves behind
// with a handler that ignores its cancelled context (awaitEvents). It
// sends what the loop returned to done. A handler that exits its
// goroutine (runtime.Goexit) failed: its event comes again as after an
// error, and another goroutine goes on with the loop. Before, the loop
// ended with that goroutine, the member kept its partitions, and the stop
// waited 5 s more for the handler.
func (g *Group) consumeEvents(ctx, hctx context.Context, m *GroupMember, run *groupRun, handle func(ctx context.Context, m *GroupMember, ev Event, run *groupRun) error, done chan<- error) {
	defer run.call.afterExit(func(err error) {
		run.call = handlerCall{}
		if g.handled(ctx, m, run.ev, run, err) {
			go g.consumeEvents(ctx, hctx, m, run, handle, done)
		} else {
			done <- nil
		}
	})
	done <- g.eventLoop(ctx, hctx, m, run, handle)
}

// eventLoop is consumeEvents' loop.
func (g *Group) eventLoop(ctx, hctx context.Context, m *GroupMember, run *groupRun, handle func(ctx context.Context, m *GroupMember, ev Event, run *groupRun) error) error {
	log := m.opts.Logger
	for {
		ev, err := m.Recv(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrClosed):
			return err
		case err != nil:
			log.Warn("alkstore: group member could not read", "group", g.name, "member", m.id, "error", err)
			if !sleepCtx(ctx, m.opts.RetryDelay) {
				return nil
			}
			continue
		}
		// A stop lets the event in flight finish and commit.
		run.offset.Store(ev.Offset)
		run.ev = ev
		if !g.handled(ctx, m, ev, run, handle(hctx, m, ev, run)) {
			return nil
		}
	}
}

// handled does what the result of ev's handler asks (err: see handle),
// and reports whether the loop goes on.
func (g *Group) handled(ctx context.Context, m *GroupMember, ev Event, run *groupRun, err error) bool {
	switch {
	case run.left.Load():
		return false // the loop returned without this handler, and the member left
	case err == nil:
	case ctx.Err() != nil:
		m.redeliver(ev, time.Time{})
		return false
	case !m.holds(ev):
		// The partition moved on (the member's own fencing says so,
		// not the handler's error, which may wrap ErrClaimLost for
		// its own reasons): its new owner handles ev.
	default:
		m.opts.Logger.Warn("alkstore: group handler failed; retrying the event", "group", g.name, "member", m.id,
			"offset", ev.Offset, "error", err)
		// Only ev's partition waits; the others go on.
		m.redeliver(ev, g.s.now().Add(m.opts.RetryDelay))
	}
	return true
}

// groupRun is the event a group's loop has in flight, as the loop sees it
// when it leaves the handler behind (awaitEvents).
type groupRun struct {
	offset atomic.Int64 // the event's
	// tx: the state of the event's transaction (ConsumeTx), once begun;
	// an earlier event's, ended, until then.
	tx   atomic.Pointer[txState]
	left atomic.Bool // the loop left the handler behind
	// ev and call: the event in flight and its handler's call (see
	// handlerCall), the loop's goroutine's alone.
	ev   Event
	call handlerCall
}

// errLeftBehind is why a transaction a group member's handler was to run
// in rolls back unused: the loop had left that handler behind as the
// transaction began.
var errLeftBehind = errors.New("the group's loop left the event's handler behind")

// began records tx, the transaction of the event in flight, before its
// handler runs: errLeftBehind once the loop left the handler behind
// (the transaction then rolls back, the handler not run). Stored before
// left is read, as leave sets left before it reads tx: either the loop
// rolls tx back, or the handler never runs in it.
func (r *groupRun) began(tx Tx) error {
	r.tx.Store(tx.h.state)
	if r.left.Load() {
		return errLeftBehind
	}
	return nil
}

// awaitEvents waits for the loop's goroutine (consumeEvents) to return.
// Once the stop cancelled the handler's context (hctx: its Grace ran out,
// or the store's hard stop came) it waits hardStopWait more at most, as
// Work waits for its handlers, then leaves behind a handler that ignores
// its context (leaveHandler), so that the loop returns and the member
// leaves. Before, the loop waited for that handler for ever: a graceful
// Shutdown waited for its deadline, then the hard stop's 7 s (67 s of a
// 60 s deadline), and on SQLite the member's transaction held the writer
// until the store closed, under the settles of the jobs the stop had
// cancelled, which waited for it: their releases never landed, and the
// jobs stayed running, their attempts spent (review57 F2).
func (g *Group) awaitEvents(hctx context.Context, m *GroupMember, run *groupRun, events <-chan error) error {
	select {
	case err := <-events:
		return err
	case <-hctx.Done():
	}
	t := time.NewTimer(hardStopWait)
	defer t.Stop()
	select {
	case err := <-events:
		return err
	case <-t.C:
	}
	g.leaveHandler(m, run)
	return nil
}

// leaveHandler leaves the handler in flight behind: what it returns later
// neither commits nor settles anything (consumeEvents returns), and its
// transaction (ConsumeTx) is rolled back now, with its writes, its
// CommitTx (the member hands its partition out again from the committed
// offset: the event is not committed, and the partition's next owner
// handles it) and its transaction slot. On SQLite the rollback frees the
// writer, and the claims of the store's jobs that waited for it are kept
// first (keepWaitingClaims), as Work's rollback of a hung WorkTx
// handler's transaction keeps them (Tx.keepOnAbandon).
func (g *Group) leaveHandler(m *GroupMember, run *groupRun) {
	run.left.Store(true)
	if st := run.tx.Load(); st != nil {
		var keep func(context.Context, ops) error
		if g.s.singleWriter() {
			keep = g.s.keepWaitingClaims
		}
		leaveHandlerTx(st, keep)
	}
	m.opts.Logger.Warn("alkstore: group handler ignored its cancelled context; the member leaves without it, and its event goes to the partition's next owner",
		"group", g.name, "member", m.id, "offset", run.offset.Load(), "waited", hardStopWait)
}

// finish records that Consume handled ev: the next flush commits it.
func (m *GroupMember) finish(ev Event) {
	p := GroupPartition(ev, m.n)
	m.mu.Lock()
	defer m.mu.Unlock()
	if o := m.owned[p]; o != nil {
		o.finished = max(o.finished, ev.Offset)
	}
}

// buffered is how many events are read ahead (some of them other members').
func (m *GroupMember) buffered() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.buf)
}

// Redeliver hands ev out again: the next Recv returns it before any later
// event of its partition (the member's other partitions are not held up).
// Use it when ev's handling failed without a commit, say its transaction
// rolled back before CommitTx: calling Recv and committing the next event
// of the partition would skip ev. (A transaction that rolls back after
// CommitTx rewinds the partition itself.) It fails with ErrClaimLost when
// the member no longer holds ev's partition (its next owner delivers ev),
// and with ErrInvalidArgument for an event the member did not deliver, as
// Commit does, and for one at or below the partition's committed offset
// (ev committed, or an event before the committed one), a CommitTx's whose
// transaction has not ended included, and an adopted transaction's (whose
// end the store does not see): it was handled, and handing it out again
// would deliver committed events twice. Events of the partition handed
// out before ev and not
// committed stay uncommitted: a release of the partition (a rebalance, a
// leave) commits none of them, and they go to its next owner.
func (m *GroupMember) Redeliver(ev Event) error {
	if ev.Stream != m.ref.stream {
		return opErr("group redeliver", m.g.name, fmt.Errorf("%w: event %d is of stream %q, not of the group's", ErrInvalidArgument, ev.Offset, ev.Stream))
	}
	p := GroupPartition(ev, m.n)
	m.mu.Lock()
	_, err := m.deliveredIn(p, ev)
	if o := m.owned[p]; err == nil && ev.Offset <= o.committed {
		err = fmt.Errorf("%w: event %d of partition %d is committed (the partition is committed through %d): it is not delivered again",
			ErrInvalidArgument, ev.Offset, p, o.committed)
	} else if err == nil && ev.Offset <= o.inTx {
		// A CommitTx through it whose transaction has not ended (or an
		// adopted one, whose end the store does not see): accepted, the
		// event was handed out again and the commit landed anyway.
		err = fmt.Errorf("%w: event %d of partition %d is committed in a transaction (CommitTx through %d): it is not delivered again",
			ErrInvalidArgument, ev.Offset, p, o.inTx)
	}
	m.mu.Unlock()
	if err != nil {
		return opErr("group redeliver", m.g.name, err)
	}
	m.redeliver(ev, time.Time{})
	return nil
}

// deliveredIn is the token of the claim ev (of partition p) was delivered
// in, while the member holds it; with m.mu held. ErrInvalidArgument when
// no Recv of the member returned ev (nor a later event of p): committing
// it would skip the partition's events before it that nobody handled.
// ErrClaimLost when the member delivered it but no longer holds its
// partition under that claim (lost, released, or claimed again since,
// reading from the committed offset): the partition's owner delivers it
// again. An event at or below the offset the claim started from was not
// delivered under it: ErrClaimLost when an earlier claim delivered it (it
// was committed since, by this member or another, so accepting it would
// let a CommitTx commit its effects twice), else ErrInvalidArgument.
func (m *GroupMember) deliveredIn(p int, ev Event) (int64, error) {
	o := m.owned[p]
	switch {
	case ev.Offset <= 0 || ev.Offset > m.handed[p] || o != nil && !o.lost && ev.Offset <= o.from && ev.Offset > o.handedBy:
		return 0, fmt.Errorf("%w: event %d of partition %d was not delivered to this member", ErrInvalidArgument, ev.Offset, p)
	case o == nil || o.lost:
		return 0, fmt.Errorf("%w: partition %d of event %d is not this member's", ErrClaimLost, p, ev.Offset)
	case ev.Offset > o.highest || ev.Offset <= o.from:
		return 0, fmt.Errorf("%w: event %d of partition %d was delivered under an earlier claim of the partition", ErrClaimLost, ev.Offset, p)
	}
	return o.token, nil
}

// holds reports whether the member still holds ev's partition under the
// claim it was delivered in: neither a renewal, a commit nor a step found
// it lost.
func (m *GroupMember) holds(ev Event) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.owned[GroupPartition(ev, m.n)]
	return o != nil && !o.lost
}

// redeliver moves ev's partition back before ev, for Recv to hand it out
// again from the stream, not before at: until then the partition waits
// (its events are not handed out) while the others go on.
func (m *GroupMember) redeliver(ev Event, at time.Time) {
	p := GroupPartition(ev, m.n)
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.owned[p]
	if o == nil || o.lost {
		return
	}
	if o.cursor >= ev.Offset { // (a rolled-back CommitTx rewound it already)
		// Events before ev handed out and not finished stay outstanding:
		// delivered goes back to the last of them (or below ev, when ev
		// was not the last handed out), so that a release or commit of
		// the partition does not commit them (position).
		o.cursor = ev.Offset - 1
		if ev.Offset == o.delivered {
			o.delivered = o.before
		} else {
			o.delivered = min(o.delivered, ev.Offset-1)
		}
	}
	o.retryAt, o.inPage = at, false
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
