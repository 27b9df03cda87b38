package envelope

import "sort"

// sortedKeys gives table keys in a fixed order so equal tables encode to equal bytes.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
