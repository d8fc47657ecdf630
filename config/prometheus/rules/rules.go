// Package rules carries PicoMQ's alert rules (picomq.rules.yaml, the file
// promtool checks and tests) into the operator, which renders them as a
// PrometheusRule per StreamCluster for spec.monitoring.prometheusRule.
package rules

import _ "embed"

// YAML is picomq.rules.yaml: Prometheus's rule file format.
//
//go:embed picomq.rules.yaml
var YAML []byte

// BrokerGroup is the group of alerts about a cluster's brokers (the one a
// StreamCluster's PrometheusRule carries); the operator's own alerts are
// in the other group.
const BrokerGroup = "picomq.brokers"
