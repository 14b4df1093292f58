// ds41/core/stdlib_select.hpp — the selection and sorting steps of GCC's libstdc++, for host and device.
//
// torch.topk on the CPU (the reference's) hands (value, index) pairs to std::partial_sort,
// std::nth_element and std::sort with a comparator that never looks at the index, so among equal
// values its answer is whatever those algorithms leave (core/topk.hpp). To give the same answer on
// the device, and from one source on both backends, ds41 performs the same steps itself: the
// algorithms as libstdc++ (GCC 12, the goldens' torch's) defines them — heap select and heap sort
// (std::partial_sort), introselect with a median-of-three pivot and insertion sort below four
// elements (std::nth_element), introsort down to runs of 16 then insertion sort (std::sort) — the
// same comparisons on the same positions in the same order, written from their specification.
// tests/test_topk.cpp compares every entry point with the standard library itself on many
// tie-heavy rows (host builds use libstdc++) and with vectors torch made.
//
// Differences from the library that cannot change a result: introsort's recursion on the right
// part is an explicit stack (the parts are disjoint, so the order they are finished in does not
// matter), and lengths are `long`.
#pragma once
#include "numeric.hpp"

#include "fp_exact_begin.hpp"
namespace ds41::stdlib_select {

/// floor(log2(n)) for n >= 1 (libstdc++'s std::__lg).
DS41_HD int floor_log2(long n) {
  int r = 0;
  while (n > 1) {
    n >>= 1;
    ++r;
  }
  return r;
}

template <class T>
DS41_HD void swap_at(T* a, T* b) {
  T t = *a;
  *a = *b;
  *b = t;
}

/// Sift `value` up from `hole` towards `top` (std::__push_heap).
template <class T, class Less>
DS41_HD void push_heap(T* first, long hole, long top, T value, Less less) {
  long parent = (hole - 1) / 2;
  while (hole > top && less(first[parent], value)) {
    first[hole] = first[parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  first[hole] = value;
}

/// Move the hole at `hole` down to a leaf along the greater children, then push `value` up from
/// there (std::__adjust_heap).
template <class T, class Less>
DS41_HD void adjust_heap(T* first, long hole, long len, T value, Less less) {
  const long top = hole;
  long child = hole;
  while (child < (len - 1) / 2) {
    child = 2 * (child + 1);
    if (less(first[child], first[child - 1])) --child;
    first[hole] = first[child];
    hole = child;
  }
  if ((len & 1) == 0 && child == (len - 2) / 2) {
    child = 2 * (child + 1);
    first[hole] = first[child - 1];
    hole = child - 1;
  }
  push_heap(first, hole, top, value, less);
}

/// std::__make_heap: a max-heap under `less`, built from the last parent down.
template <class T, class Less>
DS41_HD void make_heap(T* first, long len, Less less) {
  if (len < 2) return;
  for (long parent = (len - 2) / 2;; --parent) {
    adjust_heap(first, parent, len, first[parent], less);
    if (parent == 0) return;
  }
}

/// std::__pop_heap: the top moves to *result, result's old value is sifted into the heap [0, len).
template <class T, class Less>
DS41_HD void pop_heap(T* first, long len, T* result, Less less) {
  T value = *result;
  *result = first[0];
  adjust_heap(first, 0, len, value, less);
}

/// std::__heap_select: [0, middle) ends up holding `middle` least elements (as a heap).
template <class T, class Less>
DS41_HD void heap_select(T* first, long middle, long len, Less less) {
  make_heap(first, middle, less);
  for (long i = middle; i < len; ++i)
    if (less(first[i], first[0])) pop_heap(first, middle, first + i, less);
}

/// std::__sort_heap.
template <class T, class Less>
DS41_HD void sort_heap(T* first, long len, Less less) {
  while (len > 1) {
    --len;
    pop_heap(first, len, first + len, less);
  }
}

/// std::partial_sort(first, first + middle, first + len, less).
template <class T, class Less>
DS41_HD void partial_sort(T* first, long middle, long len, Less less) {
  heap_select(first, middle, len, less);
  sort_heap(first, middle, less);
}

/// std::__unguarded_linear_insert.
template <class T, class Less>
DS41_HD void unguarded_linear_insert(T* last, Less less) {
  T value = *last;
  T* next = last - 1;
  while (less(value, *next)) {
    *last = *next;
    last = next;
    --next;
  }
  *last = value;
}

/// std::__insertion_sort.
template <class T, class Less>
DS41_HD void insertion_sort(T* first, T* last, Less less) {
  if (first == last) return;
  for (T* i = first + 1; i != last; ++i) {
    if (less(*i, *first)) {
      T value = *i;
      for (T* p = i; p != first; --p) *p = *(p - 1);
      *first = value;
    } else {
      unguarded_linear_insert(i, less);
    }
  }
}

/// std::__move_median_to_first.
template <class T, class Less>
DS41_HD void move_median_to_first(T* result, T* a, T* b, T* c, Less less) {
  if (less(*a, *b)) {
    if (less(*b, *c))
      swap_at(result, b);
    else if (less(*a, *c))
      swap_at(result, c);
    else
      swap_at(result, a);
  } else if (less(*a, *c)) {
    swap_at(result, a);
  } else if (less(*b, *c)) {
    swap_at(result, c);
  } else {
    swap_at(result, b);
  }
}

/// std::__unguarded_partition around *pivot.
template <class T, class Less>
DS41_HD T* unguarded_partition(T* first, T* last, T* pivot, Less less) {
  while (true) {
    while (less(*first, *pivot)) ++first;
    --last;
    while (less(*pivot, *last)) --last;
    if (!(first < last)) return first;
    swap_at(first, last);
    ++first;
  }
}

/// std::__unguarded_partition_pivot: median of (first+1, middle, last-1) to the front, then partition.
template <class T, class Less>
DS41_HD T* unguarded_partition_pivot(T* first, T* last, Less less) {
  T* mid = first + (last - first) / 2;
  move_median_to_first(first, first + 1, mid, last - 1, less);
  return unguarded_partition(first + 1, last, first, less);
}

/// std::nth_element(first, first + nth, first + len, less) (std::__introselect).
template <class T, class Less>
DS41_HD void nth_element(T* first, long nth, long len, Less less) {
  if (len == 0 || nth == len) return;
  T* last = first + len;
  T* pnth = first + nth;
  int depth = floor_log2(len) * 2;
  while (last - first > 3) {
    if (depth == 0) {
      heap_select(first, pnth + 1 - first, last - first, less);
      swap_at(first, pnth);  // the nth element to its place
      return;
    }
    --depth;
    T* cut = unguarded_partition_pivot(first, last, less);
    if (cut <= pnth)
      first = cut;
    else
      last = cut;
  }
  insertion_sort(first, last, less);
}

/// std::sort(first, first + len, less): introsort of runs longer than 16 (heap sort where the depth
/// runs out), then std::__final_insertion_sort. len < 2^32.
template <class T, class Less>
DS41_HD void sort(T* first, long len, Less less) {
  if (len <= 0) return;
  constexpr long kThreshold = 16;
  struct Range {
    long first, last;
    int depth;
  };
  // the depths on the stack strictly decrease from 2 * floor_log2(len) - 1: 64 entries hold any
  // len below 2^32 (torch_topk_row's are ints)
  Range stack[64];
  int top = 0;
  stack[top++] = {0, len, floor_log2(len) * 2};
  while (top > 0) {
    Range r = stack[--top];
    while (r.last - r.first > kThreshold) {
      if (r.depth == 0) {
        partial_sort(first + r.first, r.last - r.first, r.last - r.first, less);
        break;
      }
      --r.depth;
      const long cut = unguarded_partition_pivot(first + r.first, first + r.last, less) - first;
      stack[top++] = {r.first, cut, r.depth};  // the library recurses on [cut, last) and loops on this
      r.first = cut;
    }
  }
  T* last = first + len;
  if (len > kThreshold) {
    insertion_sort(first, first + kThreshold, less);
    for (T* i = first + kThreshold; i != last; ++i) unguarded_linear_insert(i, less);
  } else {
    insertion_sort(first, last, less);
  }
}

}  // namespace ds41::stdlib_select
#include "fp_exact_end.hpp"
