package resources

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
)

// Values of LabelServiceRole.
const (
	ServiceRolePeers  = "peers"
	ServiceRoleClient = "client"
)

// HeadlessService gives every broker pod a stable DNS name,
// <pod>.<cluster>-headless.<namespace>.svc, published before the pod is
// ready: brokers must find each other to elect the metadata leader that
// makes them ready.
func HeadlessService(c *streamsv1alpha1.StreamCluster) *corev1.Service {
	meta := objectMeta(c, HeadlessServiceName(c))
	meta.Labels[LabelServiceRole] = ServiceRolePeers
	return &corev1.Service{
		TypeMeta:   typeMeta("v1", "Service"),
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceTypeClusterIP,
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 SelectorLabels(c),
			Ports: []corev1.ServicePort{
				{Name: ClientPortName, Port: ClientPort, TargetPort: intstr.FromString(ClientPortName), Protocol: corev1.ProtocolTCP},
				{Name: PeerPortName, Port: PeerPort, TargetPort: intstr.FromString(PeerPortName), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// ClientService is the Service applications (and the operator's Stream
// controller) connect to: ready brokers only, on spec.service.port, of
// spec.service.type, with spec.service.annotations. Any broker accepts any
// request and proxies it to the stream's owner.
func ClientService(c *streamsv1alpha1.StreamCluster) *corev1.Service {
	meta := objectMeta(c, ClientServiceName(c))
	meta.Labels[LabelServiceRole] = ServiceRoleClient
	if len(c.Spec.Service.Annotations) > 0 {
		meta.Annotations = merged(nil, c.Spec.Service.Annotations)
	}
	typ := c.Spec.Service.Type
	if typ == "" {
		typ = corev1.ServiceTypeClusterIP
	}
	return &corev1.Service{
		TypeMeta:   typeMeta("v1", "Service"),
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Selector: SelectorLabels(c),
			Ports: []corev1.ServicePort{
				{Name: ClientPortName, Port: servicePort(c), TargetPort: intstr.FromString(ClientPortName), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}
