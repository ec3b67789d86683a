package fleet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The diagnosis mode's CSV holds one line per admission, in the order added,
// under its header.
func TestAdmissionLogWrite(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		rows []admission
		want []string
	}{
		{"none", nil, nil},
		{"two", []admission{
			{key: 3, cost: 1, inst: 2, early: 0, start: 100, end: 150, t: 140, reset: 1_000_000, remaining: 7},
			{key: 18, cost: 2, inst: 0, early: 3, start: -5, end: 400, t: 390, reset: 5, remaining: 0},
		}, []string{"3,2,100,150,140,0,1000000,7,1", "18,0,-5,400,390,3,5,0,2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l := &admissionLog{}
			for _, r := range c.rows {
				l.add(r)
			}
			file := filepath.Join(t.TempDir(), "adm.csv")
			require.NoError(t, l.write(file))
			b, err := os.ReadFile(file)
			require.NoError(t, err)
			lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			require.Equal(t, "key,inst,call_start,call_end,t,early,reset_after,remaining,cost", lines[0])
			require.Equal(t, c.want, nilIfEmpty(lines[1:]))
		})
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}
