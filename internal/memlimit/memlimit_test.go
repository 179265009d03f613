package memlimit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRoot builds a root with proc/self/{cgroup,mountinfo} and the given
// files (path relative to root → content).
func fakeRoot(t *testing.T, self, mountinfo string, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	files["proc/self/cgroup"] = self
	files["proc/self/mountinfo"] = mountinfo
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const v1Mounts = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
`

const v2Mounts = `30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
`

func TestCgroupLimit(t *testing.T) {
	for _, tc := range []struct {
		name      string
		self      string
		mountinfo string
		files     map[string]string
		want      int64
	}{
		{
			name:      "v1 own limit",
			self:      "4:memory:/app/n1\n1:cpu:/\n",
			mountinfo: v1Mounts,
			files: map[string]string{
				"sys/fs/cgroup/memory/app/n1/memory.limit_in_bytes": "1073741824\n",
				"sys/fs/cgroup/memory/app/memory.limit_in_bytes":    "9223372036854771712\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes":        "9223372036854771712\n",
			},
			want: 1 << 30,
		},
		{
			name:      "v1 an ancestor's limit is smaller",
			self:      "4:memory:/app/n1\n",
			mountinfo: v1Mounts,
			files: map[string]string{
				"sys/fs/cgroup/memory/app/n1/memory.limit_in_bytes": "9223372036854771712\n",
				"sys/fs/cgroup/memory/app/memory.limit_in_bytes":    "536870912\n",
			},
			want: 512 << 20,
		},
		{
			name:      "v1 unlimited",
			self:      "4:memory:/\n",
			mountinfo: v1Mounts,
			files: map[string]string{
				"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
			},
			want: 0,
		},
		{
			name:      "v2 own limit",
			self:      "0::/system.slice/leased.service\n",
			mountinfo: v2Mounts,
			files: map[string]string{
				"sys/fs/cgroup/system.slice/leased.service/memory.max": "2147483648\n",
				"sys/fs/cgroup/system.slice/memory.max":                "max\n",
			},
			want: 2 << 30,
		},
		{
			name:      "v2 max",
			self:      "0::/user.slice\n",
			mountinfo: v2Mounts,
			files:     map[string]string{"sys/fs/cgroup/user.slice/memory.max": "max\n"},
			want:      0,
		},
		{
			name:      "v2 namespaced: the path is outside the mount's view",
			self:      "0::/../../outside\n",
			mountinfo: v2Mounts,
			files:     map[string]string{"sys/fs/cgroup/memory.max": "1000000000\n"},
			want:      1e9,
		},
		{
			name:      "no cgroup mounts",
			self:      "0::/\n",
			mountinfo: "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n",
			files:     map[string]string{},
			want:      0,
		},
		{
			name:      "garbage files",
			self:      "nonsense\n::\n",
			mountinfo: "x - \n- cgroup2\n",
			files:     map[string]string{},
			want:      0,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeRoot(t, tc.self, tc.mountinfo, tc.files)
			got, err := CgroupLimit(root)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("CgroupLimit = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestChoose(t *testing.T) {
	root := fakeRoot(t, "4:memory:/n1\n", v1Mounts, map[string]string{
		"sys/fs/cgroup/memory/n1/memory.limit_in_bytes": "1073741824\n",
	})
	var gib int64 = 1 << 30
	auto := Choice{Bytes: int64(float64(gib) * Ratio), Source: "cgroup", Cgroup: gib}
	for _, tc := range []struct {
		flag, env string
		want      Choice
		err       string
	}{
		{flag: "auto", want: auto},
		{flag: "", want: auto},
		{flag: "auto", env: "800MiB", want: Choice{Source: "GOMEMLIMIT"}},
		{flag: "700MiB", env: "800MiB", want: Choice{Bytes: 700 << 20, Source: "flag"}},
		{flag: "off", want: Choice{Source: "none"}},
		{flag: "0", err: "above zero"},
		{flag: "lots", err: "not a size"},
	} {
		got, err := Choose(tc.flag, tc.env, root)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Choose(%q, %q) error = %v, want one saying %q", tc.flag, tc.env, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Choose(%q, %q) = %+v, %v; want %+v", tc.flag, tc.env, got, err, tc.want)
		}
	}
	// No cgroup: auto sets nothing.
	none := fakeRoot(t, "0::/\n", "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n", map[string]string{})
	if got, err := Choose("auto", "", none); err != nil || got.Source != "none" || got.Bytes != 0 {
		t.Errorf("Choose(auto) without a cgroup = %+v, %v", got, err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1024": 1024, "512B": 512, "800MiB": 800 << 20, "1GiB": 1 << 30,
		"1GB": 1e9, "64KiB": 64 << 10, "2TiB": 2 << 40, "900MB": 900e6,
	} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1GiB", "1.5GiB", "1 GiB", "1gib", "9999999999TiB"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

// TestCgroupLimitHere reads this machine's real files: it must not fail,
// whatever the machine has.
func TestCgroupLimitHere(t *testing.T) {
	n, err := CgroupLimit("/")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	t.Logf("this process's cgroup memory limit: %d (0: none)", n)
}
