package ensemble

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/picomq/picomq/broker/crashfs"
	"github.com/picomq/picomq/broker/journal"
	"github.com/picomq/picomq/broker/journal/journaltest"
)

// The protocol's deterministic tier, first cut: one stream, five brokers
// with a journal each on crashfs, a metadata log that is always right, and
// a network that delays, reorders and loses messages. Owners append and
// send each object to their ensemble; members answer; brokers crash (torn
// tails, page cache lost) and restart, or are wiped and come back as new
// members (ensembles name members by incarnation, so a wiped one is no
// fenced copy of what the old one held); new owners take the stream — the
// old one, if alive, is not told (a paused owner resumed) — and recover:
// fence, read, build the chain, copy it, commit. Owners also replace a
// member of their ensemble (a down one when there is one): while the
// change is pending every object not yet acknowledged needs a write quorum
// of both ensembles; once the log applies it, it checkpoints the end it
// named and recoveries read the new ensemble only. Checked at every
// acknowledgement (by the model's own count of synced copies, in every
// ensemble the object must reach) and at every recovery: every
// acknowledged part is in the chain at its offset, and no offset is ever
// acknowledged with two objects. Drains and group offsets come with the
// replication package that runs these rules (issue 29).

var simSeeds = flag.Int("sim.seeds", 200, "protocol simulation: seeds to run")

const simStream = 1

type simMsg struct {
	at       int
	from, to string
	reply    bool // an answer to an object sent
	obj      journal.Object
	epoch    int64 // the sending owner's
	ok       bool  // an answer's
	fenced   bool
}

type simBroker struct {
	dir *crashfs.Dir
	j   *journal.Journal // nil while down
}

type simOwner struct {
	broker   string
	epoch    int64
	ensemble []string
	next     uint64
	acks     *Acks
	sent     map[uint64]journal.Object
	fenced   bool
	// pending is the ensemble a change proposed and not yet applied
	// replaces ensemble with; pendingEnd the acknowledged end it records.
	pending    []string
	pendingEnd uint64
}

// members is every member the owner sends to: its ensemble, and while a
// change is pending the new one too.
func (o *simOwner) members() []string {
	out := slices.Clone(o.ensemble)
	for _, m := range o.pending {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

type sim struct {
	t       *testing.T
	seed    uint64
	rng     *rand.Rand
	now     int
	brokers map[string]*simBroker
	names   []string
	owners  []*simOwner // every owner ever, the newest last
	epochs  []Epoch     // the log: every open
	msgs    []simMsg
	nextID  uint64
	// acked: the committed truth — acknowledged parts and adopted chains,
	// by offset.
	acked map[uint64]Copy
	// dirs: every member's directory, wiped ones' included, by member id;
	// held: where each member's journal said it held each object when it
	// answered (segment, range), for the durability check at ack time.
	dirs map[string]*crashfs.Dir
	held map[string]map[uint64]where
	// The last checkpoint: the acknowledged end it recorded, and the
	// first open whose ensemble a recovery must still read (its owner's).
	// script, when set, makes the next failover's choices (the fixed
	// scenarios); scripted sims lose and delay no message.
	script          *simScript
	scripted        bool
	checkpoint      uint64
	checkpointBy    int64 // the epoch of the owner that took it
	checkpointEpoch int
	stats           struct{ appends, acks, crashes, wipes, recoveries, waits, halfway, refused, checkpoints, changes, applied int }
}

func TestProtocolSimulation(t *testing.T) {
	var total sim
	for seed := range uint64(*simSeeds) {
		s := runSim(t, seed, 400)
		total.stats.appends += s.stats.appends
		total.stats.acks += s.stats.acks
		total.stats.crashes += s.stats.crashes
		total.stats.recoveries += s.stats.recoveries
		total.stats.waits += s.stats.waits
		total.stats.refused += s.stats.refused
		total.stats.checkpoints += s.stats.checkpoints
		total.stats.wipes += s.stats.wipes
		total.stats.halfway += s.stats.halfway
		total.stats.changes += s.stats.changes
		total.stats.applied += s.stats.applied
		if t.Failed() {
			return
		}
	}
	t.Logf("%d seeds: %d appends, %d parts acknowledged, %d checkpoints, %d ensemble changes proposed (%d applied), %d crashes (%d wiped), %d recoveries (%d waited for fenced copies, %d died before committing), %d objects refused by a fence",
		*simSeeds, total.stats.appends, total.stats.acks, total.stats.checkpoints, total.stats.changes, total.stats.applied, total.stats.crashes, total.stats.wipes, total.stats.recoveries, total.stats.waits, total.stats.halfway, total.stats.refused)
	if total.stats.acks == 0 || total.stats.recoveries == 0 || total.stats.refused == 0 || total.stats.applied == 0 {
		t.Fatal("the simulation exercised nothing: no acknowledgement, recovery or fence refusal")
	}
}

func runSim(t *testing.T, seed uint64, steps int) *sim {
	s := &sim{t: t, seed: seed, rng: newRand(seed), brokers: map[string]*simBroker{}, acked: map[uint64]Copy{}, nextID: 1,
		dirs: map[string]*crashfs.Dir{}, held: map[string]map[uint64]where{}}
	for i := range 5 {
		name := fmt.Sprintf("b%d", i)
		name += "/1" // its incarnation: a wiped broker comes back as another member
		s.names = append(s.names, name)
		s.brokers[name] = &simBroker{dir: &crashfs.Dir{}}
		s.dirs[name] = s.brokers[name].dir
		s.restart(name)
	}
	defer s.closeAll()
	s.failover()
	for s.now = 0; s.now < steps && !t.Failed(); s.now++ {
		if o := s.current(); (o == nil || o.fenced || !s.up(o.broker)) && s.rng.IntN(5) == 0 {
			s.failover() // the lease of a dead owner runs out
			continue
		}
		switch r := s.rng.IntN(100); {
		case r < 40:
			s.appendObject()
		case r < 76:
			for range 1 + s.rng.IntN(4) {
				s.deliver()
			}
		case r < 83:
			s.resend()
		case r < 86:
			s.crash(s.names[s.rng.IntN(len(s.names))])
		case r < 87:
			s.wipe(s.rng.IntN(len(s.names)))
		case r < 91:
			s.restart(s.names[s.rng.IntN(len(s.names))])
		case r < 94:
			s.checkpointNow()
		case r < 96:
			s.proposeChange()
		case r < 98:
			s.applyChange()
		default:
			s.failover()
		}
	}
	// Everyone back, one last recovery: it must find everything.
	for _, name := range s.names {
		s.restart(name)
	}
	s.failover()
	return s
}

func (s *sim) fail(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("seed %d step %d: %s", s.seed, s.now, fmt.Sprintf(format, args...))
}

func (s *sim) up(name string) bool {
	b, ok := s.brokers[name]
	return ok && b.j != nil
}

func (s *sim) restart(name string) {
	b := s.brokers[name]
	if b.j != nil {
		return
	}
	j, err := journal.Open(journaltest.FS(b.dir), journal.Options{Incarnation: name})
	if err != nil {
		s.fail("open %s: %v", name, err)
	}
	if err := j.Damaged(); err != nil {
		s.fail("%s's journal damaged by a crash that only tears tails: %v", name, err)
	}
	b.j = j
}

func (s *sim) crash(name string) {
	b := s.brokers[name]
	if b.j == nil {
		return
	}
	s.stats.crashes++
	b.dir.CrashTorn(s.rng)
	b.j.Close()
	b.j = nil
	// Its owner's memory is gone with it.
	if o := s.current(); o != nil && o.broker == name {
		o.fenced = true
	}
}

// wipe crashes broker i and gives it an empty directory: it comes back as
// a new member (a new incarnation), whose journal is no copy of what the
// old one held.
func (s *sim) wipe(i int) {
	old := s.names[i]
	s.crash(old)
	s.stats.wipes++
	name, inc, _ := strings.Cut(old, "/")
	n, _ := strconv.Atoi(inc)
	fresh := fmt.Sprintf("%s/%d", name, n+1)
	delete(s.brokers, old)
	s.names[i] = fresh
	s.brokers[fresh] = &simBroker{dir: &crashfs.Dir{}}
	s.dirs[fresh] = s.brokers[fresh].dir
}

func (s *sim) closeAll() {
	for _, b := range s.brokers {
		if b.j != nil {
			b.j.Close()
		}
	}
}

func (s *sim) current() *simOwner {
	if len(s.owners) == 0 {
		return nil
	}
	return s.owners[len(s.owners)-1]
}

// appendObject has a live owner — the current one, or an older one still
// running — write an object and send it to its ensemble.
func (s *sim) appendObject() {
	if len(s.owners) == 0 {
		return
	}
	o := s.owners[len(s.owners)-1]
	if len(s.owners) > 1 && s.rng.IntN(3) == 0 {
		o = s.owners[len(s.owners)-2] // paused, resumed, not told
	}
	if o.fenced || !s.up(o.broker) {
		return
	}
	s.sendObject(o)
}

// sendObject has owner o write its next object and send it to its
// ensemble (both, while a change is pending); it returns the object's id.
func (s *sim) sendObject(o *simOwner) uint64 {
	obj := journal.Object{ID: s.nextID, Parts: []journal.Part{{Stream: simStream, Epoch: o.epoch, First: o.next, Count: 1 + uint64(s.rng.IntN(3))}}}
	obj.Payload = []byte(fmt.Sprintf("object %d", obj.ID))
	s.nextID++
	o.next += obj.Parts[0].Count
	o.sent[obj.ID] = obj
	if o.pending != nil {
		o.acks.Sent(obj.ID, []uint64{simStream}, o.ensemble, o.pending)
	} else {
		o.acks.Sent(obj.ID, []uint64{simStream}, o.ensemble)
	}
	s.stats.appends++
	for _, m := range o.members() {
		if m == o.broker {
			err := s.brokers[m].j.Append(obj)
			s.noteHeld(m, obj.ID, err)
			s.answered(o, m, obj.ID, err)
			continue
		}
		s.send(simMsg{from: o.broker, to: m, obj: obj, epoch: o.epoch})
	}
	return obj.ID
}

// resend has the current owner send its oldest unacknowledged object
// again, the same bytes, to its ensemble: a timeout never rolls back.
func (s *sim) resend() {
	o := s.current()
	if o == nil || o.fenced || !s.up(o.broker) {
		return
	}
	oldest := uint64(0)
	for id := range o.sent {
		if (oldest == 0 || id < oldest) && o.acks.Waiting(id) {
			oldest = id
		}
	}
	if oldest == 0 {
		return
	}
	for _, m := range o.members() {
		if m != o.broker {
			s.send(simMsg{from: o.broker, to: m, obj: o.sent[oldest], epoch: o.epoch})
		}
	}
}

// proposeChange has the current owner replace one member of its ensemble
// (a down one when there is one: it stopped answering) by a live broker
// outside it. Until the log applies the change, every object not yet
// acknowledged needs a write quorum of both ensembles, and goes to the
// new member too; the change records the acknowledged end as of now.
func (s *sim) proposeChange() {
	o := s.current()
	if o == nil || o.fenced || !s.up(o.broker) || o.pending != nil || o.epoch != s.epochs[len(s.epochs)-1].Epoch {
		return
	}
	var gone string
	for _, m := range o.ensemble {
		if m != o.broker && (!s.up(m) || gone == "" && s.rng.IntN(2) == 0) {
			gone = m
		}
	}
	if gone == "" {
		return
	}
	var candidates []string
	for _, name := range s.names {
		if s.up(name) && !slices.Contains(o.ensemble, name) {
			candidates = append(candidates, name)
		}
	}
	if len(candidates) == 0 {
		return
	}
	s.change(o, gone, candidates[s.rng.IntN(len(candidates))])
}

// change has owner o propose replacing gone by joins in its ensemble.
func (s *sim) change(o *simOwner, gone, joins string) {
	o.pending = slices.Clone(o.ensemble)
	o.pending[slices.Index(o.pending, gone)] = joins
	o.pendingEnd = s.ackedEnd()
	o.acks.Widen(o.pending)
	s.stats.changes++
	ids := slices.Sorted(maps.Keys(o.sent))
	for _, id := range ids {
		if o.acks.Waiting(id) {
			s.send(simMsg{from: o.broker, to: joins, obj: o.sent[id], epoch: o.epoch})
		}
	}
}

// applyChange: the log applies the current owner's pending change —
// unless a later open applied first (the log refuses an older epoch's
// change). It records the new ensemble for the owner's epoch and
// checkpoints the end the change named: a recovery from then on reads
// the new ensemble (and later ones), not the old.
func (s *sim) applyChange() {
	o := s.current()
	if o == nil || o.pending == nil {
		return
	}
	if o.epoch != s.epochs[len(s.epochs)-1].Epoch {
		o.pending = nil
		return
	}
	s.epochs = append(s.epochs, Epoch{Epoch: o.epoch, Ensemble: o.pending})
	if o.pendingEnd >= s.checkpoint {
		s.checkpoint, s.checkpointBy = o.pendingEnd, o.epoch
	}
	s.checkpointEpoch = len(s.epochs) - 1
	o.ensemble, o.pending = o.pending, nil
	s.stats.applied++
}

// ackedEnd is the end of what is acknowledged from the last checkpoint
// on, with no gap.
func (s *sim) ackedEnd() uint64 {
	end := s.checkpoint
	for {
		c, ok := s.acked[end]
		if !ok {
			return end
		}
		end = c.First + c.Count
	}
}

// noteHeld records where member's journal holds object id, once it
// answered that it does.
func (s *sim) noteHeld(member string, id uint64, err error) {
	if err != nil {
		return
	}
	seg, off, n, ok := s.brokers[member].j.Where(id)
	if !ok {
		s.fail("%s answered object %d durable and does not hold it", member, id)
	}
	if s.held[member] == nil {
		s.held[member] = map[uint64]where{}
	}
	s.held[member][id] = where{seg, off, n}
}

// where is an object's payload in a member's journal.
type where struct {
	segment string
	off, n  int64
}

// send queues a message, or loses it (one in eight).
func (s *sim) send(m simMsg) {
	if s.scripted {
		m.at = s.now
		s.msgs = append(s.msgs, m)
		return
	}
	if s.rng.IntN(8) == 0 {
		return
	}
	m.at = s.now + 1 + s.rng.IntN(4)
	s.msgs = append(s.msgs, m)
}

// deliver delivers one due message, picked at random (reordering).
func (s *sim) deliver() {
	var due []int
	for i, m := range s.msgs {
		if m.at <= s.now {
			due = append(due, i)
		}
	}
	if len(due) == 0 {
		return
	}
	s.deliverAt(due[s.rng.IntN(len(due))])
}

// deliverAt delivers message i.
func (s *sim) deliverAt(i int) {
	m := s.msgs[i]
	s.msgs = slices.Delete(s.msgs, i, i+1)
	if !s.up(m.to) {
		return
	}
	if !m.reply {
		err := s.brokers[m.to].j.Append(m.obj)
		s.noteHeld(m.to, m.obj.ID, err)
		s.send(simMsg{from: m.to, to: m.from, reply: true, obj: m.obj, epoch: m.epoch, ok: err == nil, fenced: errors.Is(err, journal.Fenced)})
		return
	}
	for _, o := range s.owners {
		if o.broker == m.to && o.epoch == m.epoch && !o.fenced {
			var err error
			switch {
			case m.fenced:
				err = journal.Fenced
			case !m.ok:
				err = errors.New("refused, not by a fence")
			}
			s.answered(o, m.from, m.obj.ID, err)
		}
	}
}

// answered is an owner hearing member's answer for object id.
func (s *sim) answered(o *simOwner, member string, id uint64, err error) {
	if err != nil {
		if errors.Is(err, journal.Fenced) {
			// Its epoch is over: it stops.
			s.stats.refused++
			o.fenced = true
			return
		}
		s.fail("owner %s epoch %d: %s answered %v", o.broker, o.epoch, member, err)
	}
	for _, a := range o.acks.Durable(id, member) {
		// The model's own rule, not the package's: a majority of the
		// ensemble holds the object durable, now, on disk.
		for _, ens := range [][]string{o.ensemble, o.pending} {
			if ens == nil {
				continue
			}
			durable := 0
			for _, m := range ens {
				if w, ok := s.held[m][a.Object]; ok && s.dirs[m].Synced(w.segment, w.off, w.n) {
					durable++
				}
			}
			if durable < len(ens)/2+1 {
				s.fail("object %d acknowledged while durable on %d of %v", a.Object, durable, ens)
			}
		}
		p := o.sent[a.Object].Parts[0]
		c := Copy{Object: a.Object, Epoch: p.Epoch, First: p.First, Count: p.Count}
		for off := p.First; off < p.First+p.Count; off++ {
			if prev, ok := s.acked[off]; ok && prev.Object != c.Object {
				s.fail("offset %d acknowledged with object %d and object %d", off, prev.Object, c.Object)
			}
			s.acked[off] = c
		}
		s.stats.acks++
	}
}

// checkpointNow has the current owner record its acknowledged end in the
// log: recoveries then start there, and read only the ensembles of its
// open and of later ones.
func (s *sim) checkpointNow() {
	o := s.current()
	if o == nil || o.fenced || !s.up(o.broker) {
		return
	}
	if o.epoch != s.epochs[len(s.epochs)-1].Epoch {
		return // a later open: the log refuses an older epoch's checkpoint
	}
	// Its own ensemble's record (an open, or a change since) is where
	// recoveries start reading.
	s.checkpoint, s.checkpointBy, s.checkpointEpoch = s.ackedEnd(), o.epoch, len(s.epochs)-1
	s.stats.checkpoints++
}

// failover: a live broker opens the stream at the next epoch and
// recovers it; on success it serves from the recovered end.
// simScript is a fixed scenario's choice for the next failover.
type simScript struct {
	owner    string
	ensemble []string
	// dies: the new owner dies after copying this many chain objects,
	// before committing (-1: it does not).
	dies int
	err  error // what the recovery answered
}

func (s *sim) failover() {
	var live []string
	for _, name := range s.names {
		if s.up(name) {
			live = append(live, name)
		}
	}
	if len(live) < 3 {
		return
	}
	owner := live[s.rng.IntN(len(live))]
	sc := s.script
	s.script = nil
	if sc != nil {
		owner = sc.owner
	}
	epoch := int64(len(s.epochs))
	ens := Choose(owner, live, 3)
	if sc != nil && sc.ensemble != nil {
		ens = sc.ensemble
	}
	prior := slices.Clone(s.epochs[s.checkpointEpoch:])
	s.epochs = append(s.epochs, Epoch{Epoch: epoch, Ensemble: ens})
	s.stats.recoveries++
	// Fence and read the new ensemble's members and, of every recorded
	// one, as few live members as the rule allows (a read quorum, picked
	// at random; the others may be slow): more would hide a rule too weak.
	var reads []Read
	fenced := map[string]bool{}
	for i, e := range append(prior, s.epochs[len(s.epochs)-1]) {
		members := slices.Clone(e.Ensemble)
		s.rng.Shuffle(len(members), func(a, b int) { members[a], members[b] = members[b], members[a] })
		need := len(members) // the new ensemble: all of it
		if i < len(prior) {
			need = ReadQuorum(len(members))
		}
		for _, m := range members {
			if fenced[m] || !s.up(m) || need == 0 {
				continue
			}
			need--
			refs, err := s.brokers[m].j.Fence(simStream, epoch)
			if err != nil {
				s.fail("fence of %s: %v", m, err)
			}
			fenced[m] = true
			r := Read{Member: m, Intact: true}
			for _, ref := range refs {
				r.Copies = append(r.Copies, Copy{Object: ref.Object, Epoch: ref.Part.Epoch, First: ref.Part.First, Count: ref.Part.Count})
			}
			reads = append(reads, r)
		}
	}
	chain, err := Recover(Checkpoint{End: s.checkpoint, Epoch: s.checkpointBy}, prior, reads)
	if sc != nil {
		sc.err = err
	}
	if errors.Is(err, TooFewFenced) {
		s.stats.waits++
		return // the open stays unrecovered; a later one retries
	}
	if err != nil {
		s.fail("recovery at epoch %d: %v", epoch, err)
	}
	for off, a := range s.acked {
		if off < s.checkpoint {
			continue // recorded in the log by the checkpoint
		}
		if !slices.ContainsFunc(chain.Objects, func(c Copy) bool { return c == a }) {
			s.fail("recovery at epoch %d: offset %d's acknowledged object %+v is not in the chain (end %d)", epoch, off, a, chain.End)
		}
	}
	// Copy the chain to the new ensemble, then commit its end — unless
	// the new owner dies first (one in six), part of the way through:
	// the open stays unrecovered, with copies here and there, and the
	// next open must read its ensemble too.
	dies := s.rng.IntN(6) == 0
	if sc != nil {
		dies = sc.dies >= 0
	}
	for i, c := range chain.Objects {
		if dies && (sc == nil && s.rng.IntN(len(chain.Objects)+1) == 0 || sc != nil && i == sc.dies) {
			s.stats.halfway++
			return
		}
		obj, ok := s.object(c.Object, reads)
		if !ok {
			s.fail("no member holds chain object %d", c.Object)
		}
		obj.Copied, obj.By = true, epoch
		for _, m := range ens {
			if err := s.brokers[m].j.Append(obj); err != nil {
				s.fail("copy of %d to %s: %v", c.Object, m, err)
			}
		}
	}
	if dies {
		s.stats.halfway++
		return // copied everything, died before committing
	}
	s.epochs[len(s.epochs)-1].Start, s.epochs[len(s.epochs)-1].Recovered = chain.End, true
	// The chain is history now: committed, as acknowledged parts are.
	for _, c := range chain.Objects {
		for off := c.First; off < c.First+c.Count; off++ {
			s.acked[off] = c
		}
	}
	s.owners = append(s.owners, &simOwner{broker: owner, epoch: epoch, ensemble: ens, next: chain.End, acks: NewAcks(), sent: map[uint64]journal.Object{}})
}

// object reads chain object id from a member that read it.
func (s *sim) object(id uint64, reads []Read) (journal.Object, bool) {
	for _, r := range reads {
		if !slices.ContainsFunc(r.Copies, func(c Copy) bool { return c.Object == id }) {
			continue
		}
		parts, payload, err := s.brokers[r.Member].j.Read(id)
		if err == nil {
			return journal.Object{ID: id, Parts: parts, Payload: payload}, true
		}
	}
	return journal.Object{}, false
}
