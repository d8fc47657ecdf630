package s3server

import (
	"os"
	"path/filepath"

	"github.com/picomq/picomq/broker/tier"
)

// WriteCredentials writes c as the files a broker's --tier-credentials-dir
// holds (tier.AccessKeyIDFile, tier.SecretAccessKeyFile), as a mounted
// Secret would: each replaced whole by a rename, so a broker re-reading
// them during a rotation never sees half a key, and ending in a newline,
// as `kubectl create secret --from-file` leaves them (the broker trims it).
func WriteCredentials(dir string, c Credential) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, v := range map[string]string{tier.AccessKeyIDFile: c.AccessKey, tier.SecretAccessKeyFile: c.SecretKey} {
		tmp := filepath.Join(dir, "."+name)
		if err := os.WriteFile(tmp, []byte(v+"\n"), 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}
