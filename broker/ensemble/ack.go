package ensemble

import "slices"

// The ack rule: an object's part of a stream is acknowledged once a write
// quorum of every ensemble the object must reach has it durable, and every
// earlier part of the stream is acknowledged (see the package doc).

// Acked is one part acknowledged: stream's records in object.
type Acked struct {
	Object, Stream uint64
}

// Acks tracks the objects an owner sent and decides, as members report
// them durable, which parts are acknowledged. Not safe for concurrent use:
// the owner's one sender goroutine owns it.
type Acks struct {
	objects map[uint64]*sent
	// streams: each stream's parts not yet acknowledged, in the order
	// sent.
	streams map[uint64][]uint64
}

type sent struct {
	ensembles [][]string
	durable   []string
	streams   []uint64
	quorate   bool
}

// NewAcks returns an empty tracker.
func NewAcks() *Acks {
	return &Acks{objects: map[uint64]*sent{}, streams: map[uint64][]uint64{}}
}

// Sent records object, with parts of streams, sent to the members of
// ensembles: one ensemble, or the old and the new while a change is
// pending. Its parts are acknowledged after every earlier part of their
// stream. Sending it again changes nothing.
func (a *Acks) Sent(object uint64, streams []uint64, ensembles ...[]string) {
	if _, ok := a.objects[object]; ok {
		return // sent again (a resend): already tracked
	}
	s := &sent{streams: slices.Clone(streams)}
	for _, e := range ensembles {
		s.ensembles = append(s.ensembles, slices.Clone(e))
	}
	a.objects[object] = s
	for _, st := range streams {
		a.streams[st] = append(a.streams[st], object)
	}
}

// Durable records that member holds object durable, and returns the parts
// acknowledged by it — this object's and later ones of its streams that
// were waiting for it — in the order each stream sent them.
func (a *Acks) Durable(object uint64, member string) []Acked {
	s, ok := a.objects[object]
	if !ok || s.quorate || slices.Contains(s.durable, member) {
		return nil
	}
	s.durable = append(s.durable, member)
	if !s.hasQuorum() {
		return nil
	}
	s.quorate = true
	var out []Acked
	for _, st := range slices.Clone(s.streams) { // release changes s.streams
		out = a.release(st, out)
	}
	return out
}

// hasQuorum: a write quorum of every ensemble holds the object.
func (s *sent) hasQuorum() bool {
	for _, e := range s.ensembles {
		n := 0
		for _, m := range s.durable {
			if slices.Contains(e, m) {
				n++
			}
		}
		if n < WriteQuorum(len(e)) {
			return false
		}
	}
	return len(s.ensembles) > 0
}

// release acknowledges stream's leading parts that have their quorum.
func (a *Acks) release(stream uint64, out []Acked) []Acked {
	q := a.streams[stream]
	for len(q) > 0 && a.objects[q[0]].quorate {
		out = append(out, Acked{Object: q[0], Stream: stream})
		a.done(q[0], stream)
		q = q[1:]
	}
	if len(q) == 0 {
		delete(a.streams, stream)
	} else {
		a.streams[stream] = q
	}
	return out
}

// done forgets object once its last part is acknowledged.
func (a *Acks) done(object, stream uint64) {
	s := a.objects[object]
	s.streams = slices.DeleteFunc(s.streams, func(st uint64) bool { return st == stream })
	if len(s.streams) == 0 {
		delete(a.objects, object)
	}
}

// Widen makes every object not yet acknowledged need a write quorum of
// ensemble too: an ensemble change applies to what was sent before it as
// well as after. That includes an object that has its quorum but waits
// for an earlier part of its stream: acknowledged after the change, past
// the end the change records, it must be found by a recovery that reads
// only the new ensemble. (The simulation found one acknowledged on the old
// ensemble alone.) The owner sends those objects to the new members.
func (a *Acks) Widen(ensemble []string) {
	for _, s := range a.objects {
		s.ensembles = append(s.ensembles, slices.Clone(ensemble))
		s.quorate = s.hasQuorum()
	}
}

// Waiting reports whether object was sent and still lacks its quorum:
// what an owner sends again after a timeout.
func (a *Acks) Waiting(object uint64) bool {
	s, ok := a.objects[object]
	return ok && !s.quorate
}

// Pending returns how many objects are not fully acknowledged.
func (a *Acks) Pending() int { return len(a.objects) }
