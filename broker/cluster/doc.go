// Package cluster is a clustered broker's rooms around its core, composed
// for cmd/broker (which stays flags -> open -> serve): the peer port and
// its server, membership in the metadata log (broker/membership), slot
// ownership through Leases (broker/ownership), replication of object
// files (broker/replication) and their repair (broker/repair), routing of
// client requests to owners (broker/routing), and the drain.
//
// A newcomer finds the drain in drain.go, the repair's view of the
// cluster in repair.go, and the composition — prepare before the core
// opens, configure the core's seams, start beside it, leave and close —
// in cluster.go.
//
// Still to come (issue 29): the journal data path on ensembles
// (broker/ensemble's rules, broker/journalpeer's transport), and rooms
// reaching the metadata log through narrow interfaces of their own rather
// than through core.Broker.Log.
package cluster
