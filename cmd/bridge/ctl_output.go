package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"
)

var outputFormats = []string{"table", "json", "yaml"}

func isOutputFormat(s string) bool { return slices.Contains(outputFormats, s) }

// now is the time relative times are shown against; tests fix it.
var now = time.Now

// render prints v (an admin API answer) in the chosen format; table is called for the
// table format.
func render(out io.Writer, format string, v any, table func(w *tabwriter.Writer)) error {
	switch format {
	case "json":
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(v)
	case "yaml":
		return writeYAML(out, v)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// writeYAML prints v as YAML with the field names and order of its JSON form (the
// API's), integers as integers.
func writeYAML(out io.Writer, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("converting to YAML: %w", err)
	}
	blockStyle(&doc)
	enc := yaml.NewEncoder(out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	return enc.Close()
}

// blockStyle turns JSON's flow style and quoting into YAML's usual block style; the
// encoder quotes a string again where it would otherwise read as another type.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// when shows a unix-milliseconds time as local RFC 3339 with how far it is from now:
// "2026-11-23T20:15:04+01:00 (in 3m12s)". 0 is "-".
func when(ms int64) string {
	if ms == 0 {
		return "-"
	}
	t := time.UnixMilli(ms)
	return t.Local().Format(time.RFC3339) + " (" + relative(t) + ")"
}

// relative is "in 3m12s", "5s ago" or "now".
func relative(t time.Time) string {
	d := t.Sub(now())
	switch {
	case d > -time.Second && d < time.Second:
		return "now"
	case d > 0:
		return "in " + human(d)
	}
	return human(-d) + " ago"
}

// human shows a duration to the second with at most two units: 450ms, 5s, 3m12s,
// 2h5m, 3d4h.
func human(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	d = d.Round(time.Second)
	days, h := d/(24*time.Hour), (d%(24*time.Hour))/time.Hour
	m, s := (d%time.Hour)/time.Minute, (d%time.Minute)/time.Second
	switch {
	case days > 0:
		return fmt.Sprintf("%dd%dh", days, h)
	case h > 0:
		return fmt.Sprintf("%dh%dm", h, m)
	case m > 0:
		return fmt.Sprintf("%dm%ds", m, s)
	}
	return fmt.Sprintf("%ds", s)
}

// dash shows "" as "-".
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// row writes one tab-separated table row.
func row(w io.Writer, cells ...any) {
	var b bytes.Buffer
	for i, c := range cells {
		if i > 0 {
			b.WriteByte('\t')
		}
		fmt.Fprint(&b, c)
	}
	b.WriteByte('\n')
	_, _ = w.Write(b.Bytes())
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// joinInts joins numbers with commas.
func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = fmt.Sprint(n)
	}
	return strings.Join(parts, ",")
}
