package vm

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/kibotos/kibotos/internal/guest"
)

// GuestParams is the kernel command line kibotos-guest reads for s (see
// internal/guest's Param constants), given the device node the guest sees
// each of s.Disks as (device(i) for s.Disks[i]): a provider knows how its
// disks are named, the rest is the same for every provider.
func GuestParams(s Spec, device func(i int) string) string {
	var params []string
	for _, role := range []Role{TemplateRoot, WritableLayer, Volume} {
		for i, d := range s.Disks {
			if d.Role != role {
				continue
			}
			switch role {
			case TemplateRoot:
				params = append(params, guest.ParamRoot+"="+device(i))
			case WritableLayer:
				params = append(params, guest.ParamLayer+"="+device(i))
			case Volume:
				params = append(params, guest.ParamVolume+"="+device(i)+":"+filepath.Clean(d.MountPath))
			}
		}
	}
	if s.BootID != "" {
		params = append(params, guest.ParamBootID+"="+s.BootID)
	}
	if s.Network != nil {
		g := s.Network.Guest()
		params = append(params, fmt.Sprintf("%s=%s,%s,%s", guest.ParamNet, g.Address, g.Gateway, g.Nameserver))
		if g.AddressV6.IsValid() {
			params = append(params, fmt.Sprintf("%s=%s,%s", guest.ParamNet6, g.AddressV6, g.GatewayV6))
		}
		if g.NoDNS {
			params = append(params, guest.ParamDNS+"="+guest.DNSUnreachable)
		}
	}
	if s.Hostname != "" {
		params = append(params, guest.ParamHostname+"="+s.Hostname)
	}
	return strings.Join(params, " ")
}
