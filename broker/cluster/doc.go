// Package cluster is a clustered broker's rooms around its core, composed
// for cmd/broker (which stays flags -> open -> serve): the peer port and
// its server, membership in the metadata log (broker/membership), slot
// ownership through Leases (broker/ownership), replication of object
// files (broker/replication) and their repair (broker/repair), routing of
// client requests to owners (broker/routing), and the drain.
//
// A newcomer finds the drain in drain.go, the repair's view of the
// cluster in repair.go, the ensembles' reach to the peers' journals and
// the re-ensemble loop in ensembles.go, and the composition — prepare
// before the core opens, configure the core's seams, start beside it,
// leave and close — in cluster.go.
//
// The composition hands the metadata log the core opened to membership,
// which reaches it only through its own narrow interface
// (membership.MetaLog). Still to come (issue 29): the log opened here
// rather than inside the core, so that no room gets it from
// core.Broker.Log.
package cluster
