package compactor

import (
	"reflect"
	"testing"
)

func TestComposeOrigin(t *testing.T) {
	tests := []struct {
		name                 string
		origin, dropped, new []int
		outLen               int
		want                 []int
	}{
		{"unchanged", []int{0, 1, 2}, nil, nil, 3, []int{0, 1, 2}},
		{"dropped the middle", []int{0, 1, 2, 3}, []int{1, 2}, nil, 2, []int{0, 3}},
		{"a summary replaces two", []int{0, 1, 2, 3}, []int{1, 2}, []int{1}, 3, []int{0, -1, 3}},
		{"masked in place", []int{0, 1, 2}, []int{1}, []int{1}, 3, []int{0, -1, 2}},
		{"second stage over a first", []int{0, -1, 3, 4, 5}, []int{1, 2}, []int{1}, 4, []int{0, -1, 4, 5}},
		{"a new message kept by a later stage stays new", []int{0, -1, 5}, nil, nil, 3, []int{0, -1, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := composeOrigin(tt.origin, tt.dropped, tt.new, tt.outLen); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("composeOrigin = %v, want %v", got, tt.want)
			}
		})
	}
}
