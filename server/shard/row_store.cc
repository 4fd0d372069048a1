#include "server/shard/row_store.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/codec/half_rows.h"
#include "common/philox.h"
#include "common/status.h"
#include "glog/logging.h"

namespace gradstream::shard {

void InitialRow(const TableSpec& spec, uint64_t row, float* out) {
  uint64_t state = SplitMix64(spec.seed ^ SplitMix64(SplitMix64(spec.table) ^ row));
  auto uniform = [&state] {  // (0, 1]: 53 bits
    state = SplitMix64(state);
    return (static_cast<double>(state >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  };
  // Box-Muller, two draws per pair of values.
  for (uint32_t j = 0; j < spec.dim; j += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    const double t = 2.0 * M_PI * uniform();
    out[j] = static_cast<float>(spec.init_std * r * std::cos(t));
    if (j + 1 < spec.dim) out[j + 1] = static_cast<float>(spec.init_std * r * std::sin(t));
  }
}

RowStore::RowStore(const TableSpec& spec, const Optimizer& optimizer, RowBudget* budget)
    : spec_(spec), budget_(budget) {
  const OptimizerState fresh = optimizer.NewState(1);
  for (const auto& slot : fresh.slots) slot_init_.push_back(slot[0]);
  values_ = RowArray(spec_.dim);
  for (size_t k = 0; k < slot_init_.size(); ++k) slots_.emplace_back(spec_.dim);
}

absl::Status RowStore::CheckIds(absl::Span<const uint64_t> ids, bool unique) const {
  bool ascending = true;
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint64_t id = ids[i];
    if (i > 0 && ids[i - 1] >= id) ascending = false;
    if (id >= spec_.table_rows) {
      return absl::InvalidArgumentError(absl::StrCat("row ", id, " is out of range: table ",
                                                     spec_.table, " has ", spec_.table_rows,
                                                     " rows"));
    }
    const uint32_t p = RowPartition(spec_.table, id, spec_.partitions);
    if (p != spec_.partition) {
      return absl::InvalidArgumentError(absl::StrCat("row ", id, " of table ", spec_.table,
                                                     " belongs to partition ", p, ", not ",
                                                     spec_.partition));
    }
  }
  // Strictly ascending ids are unique without a set: the client sends each
  // partition's ids sorted (torch.unique), so a set is built only for others.
  if (!unique || ascending) return absl::OkStatus();
  absl::flat_hash_set<uint64_t> seen;
  seen.reserve(ids.size());
  for (uint64_t id : ids) {
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("row ", id, " of table ", spec_.table, " is in the push twice"));
    }
  }
  return absl::OkStatus();
}

uint32_t RowStore::Touch(uint64_t row) {
  // The rows' count from the values (a deque's size() is not free).
  auto [it, fresh] = index_.try_emplace(row, static_cast<uint32_t>(values_.rows()));
  if (!fresh) return it->second;
  InitialRow(spec_, row, values_.Append());
  for (size_t k = 0; k < slots_.size(); ++k) {
    std::fill_n(slots_[k].Append(), spec_.dim, slot_init_[k]);
  }
  ids_.push_back(row);
  if (budget_ != nullptr) budget_->rows.fetch_add(row_bytes());
  return it->second;
}

void RowStore::TouchAll(absl::Span<const uint64_t> ids, uint32_t* out) {
  constexpr size_t kAhead = 16;  // rows whose lookups are in flight
  const size_t n = ids.size();
  for (size_t i = 0; i < std::min(n, kAhead); ++i) index_.prefetch(ids[i]);
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) index_.prefetch(ids[i + kAhead]);
    out[i] = Touch(ids[i]);
  }
}

absl::Status RowStore::Restore(std::vector<uint64_t> ids, RowArray values,
                               std::vector<RowArray> slots) {
  CHECK(!snapshot_open_);
  // No rows: a checkpoint cannot tell the width, any is the spec's.
  auto fits = [&](const RowArray& a) {
    return a.rows() == ids.size() && (ids.empty() || a.dim() == spec_.dim);
  };
  if (!fits(values) || slots.size() != slots_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("table ", spec_.table, " partition ",
                                                   spec_.partition, ": saved rows do not fit"));
  }
  for (const auto& s : slots) {
    if (!fits(s)) return absl::InvalidArgumentError("saved row state does not fit");
  }
  absl::flat_hash_map<uint64_t, uint32_t> index;
  index.reserve(ids.size());  // sized once: a restore never rehashes
  for (uint32_t i = 0; i < ids.size(); ++i) {
    if (!index.emplace(ids[i], i).second) {
      return absl::InvalidArgumentError(absl::StrCat("saved row ", ids[i], " twice"));
    }
  }
  GS_RETURN_IF_ERROR(CheckIds(ids, /*unique=*/false));
  if (budget_ != nullptr) {
    budget_->rows.fetch_add(row_bytes() * ids.size());
    budget_->rows.fetch_sub(row_bytes() * ids_.size());
  }
  index_ = std::move(index);
  ids_.assign(ids.begin(), ids.end());
  values_ = ids_.empty() ? RowArray(spec_.dim) : std::move(values);
  for (size_t k = 0; k < slots_.size(); ++k) {
    slots_[k] = ids_.empty() ? RowArray(spec_.dim) : std::move(slots[k]);
  }
  return absl::OkStatus();
}

void RowStore::BeginSnapshot() {
  CHECK(!snapshot_open_) << "one row snapshot at a time";
  snapshot_open_ = true;
  snapshot_rows_ = ids_.size();
  released_ = 0;
  snapshot_status_ = absl::OkStatus();
}

void RowStore::EndSnapshot() {
  DropKept();
  snapshot_open_ = false;
  snapshot_rows_ = 0;
  snapshot_status_ = absl::OkStatus();
}

void RowStore::DropKept() {
  if (budget_ != nullptr) budget_->kept.fetch_sub(kept_.size() * kept_row_bytes());
  kept_.clear();
  kept_.rehash(0);  // give back the map's slots too
}

void RowStore::FailSnapshot(std::string why) {
  DropKept();
  if (snapshot_status_.ok()) snapshot_status_ = absl::ResourceExhaustedError(std::move(why));
}

void RowStore::YieldToRows() {
  if (budget_ == nullptr || !budget_->rows_first.load() || !snapshot_status_.ok()) return;
  FailSnapshot(absl::StrCat("table ", spec_.table, " partition ", spec_.partition,
                            ": new rows needed the memory that the checkpoint kept of the rows "
                            "changed while it was written: checkpoint abandoned, the last one "
                            "stands"));
}

void RowStore::KeepForSnapshot(uint32_t index) {
  if (!snapshot_open_ || !snapshot_status_.ok() || index < released_ ||
      index >= snapshot_rows_) {
    return;
  }
  YieldToRows();
  if (!snapshot_status_.ok()) return;
  auto [it, inserted] = kept_.try_emplace(index);
  if (!inserted) return;  // kept at its first change
  if (budget_ != nullptr) {
    const uint64_t bytes = kept_row_bytes();
    if (budget_->max_bytes != 0 && budget_->held() + bytes > budget_->max_bytes) {
      kept_.erase(it);  // not counted yet
      FailSnapshot(absl::StrCat("table ", spec_.table, " partition ", spec_.partition,
                                ": keeping the old values of the rows changed while the "
                                "checkpoint was written would take this shard's table rows past "
                                "the ",
                                budget_->max_bytes,
                                " bytes it has for them: checkpoint abandoned, the last one "
                                "stands; run more shards or a larger --max_param_bytes"));
      return;
    }
    budget_->kept.fetch_add(bytes);
  }
  std::vector<float>& kept = it->second;
  const uint32_t dim = spec_.dim;
  kept.resize(size_t{dim} * (1 + slots_.size()));
  std::memcpy(kept.data(), params(index), dim * sizeof(float));
  for (size_t k = 0; k < slots_.size(); ++k) {
    std::memcpy(kept.data() + (k + 1) * dim, slot(static_cast<int>(k), index),
                dim * sizeof(float));
  }
}

absl::Status RowStore::SnapshotIds(uint64_t begin, uint64_t end, uint64_t* out) {
  CHECK(snapshot_open_ && begin <= end && end <= snapshot_rows_);
  YieldToRows();
  GS_RETURN_IF_ERROR(snapshot_status_);
  std::copy(ids_.begin() + begin, ids_.begin() + end, out);  // an id never changes
  return absl::OkStatus();
}

absl::Status RowStore::SnapshotFloats(int array, uint64_t begin, uint64_t end, float* out) {
  CHECK(snapshot_open_ && begin <= end && end <= snapshot_rows_ &&
        array < static_cast<int>(slots_.size()));
  YieldToRows();
  GS_RETURN_IF_ERROR(snapshot_status_);
  const size_t dim = spec_.dim;
  (array < 0 ? values_ : slots_[array]).CopyOut(begin, end, out);
  // The last array's pass, in order: rows before `end` need nothing kept.
  const bool last = array == static_cast<int>(slots_.size()) - 1 && begin <= released_;
  auto put = [&](uint64_t i, const std::vector<float>& kept) {
    std::memcpy(out + (i - begin) * dim, kept.data() + (array + 1) * dim, dim * sizeof(float));
  };
  size_t freed = 0;
  if (kept_.size() < end - begin) {
    for (auto it = kept_.begin(); it != kept_.end();) {
      if (it->first < begin || it->first >= end) {
        ++it;
        continue;
      }
      put(it->first, it->second);
      if (last) {
        kept_.erase(it++);
        ++freed;
      } else {
        ++it;
      }
    }
  } else {
    for (uint64_t i = begin; i < end; ++i) {
      auto it = kept_.find(static_cast<uint32_t>(i));
      if (it == kept_.end()) continue;
      put(i, it->second);
      if (last) {
        kept_.erase(it);
        ++freed;
      }
    }
  }
  if (last) {
    released_ = end;
    if (budget_ != nullptr) budget_->kept.fetch_sub(freed * kept_row_bytes());
  }
  return absl::OkStatus();
}

void RowStore::DropNewest(size_t keep) {
  if (keep >= ids_.size()) return;
  // Only rows a refused update created go, never rows of an open image.
  CHECK(!snapshot_open_ || keep >= snapshot_rows_);
  for (size_t i = keep; i < ids_.size(); ++i) index_.erase(ids_[i]);
  if (budget_ != nullptr) budget_->rows.fetch_sub(row_bytes() * (ids_.size() - keep));
  ids_.resize(keep);
  values_.Truncate(keep);
  for (auto& s : slots_) s.Truncate(keep);
}

absl::Status CheckRowGrads(const RowStore& store, const RowGrads& grads) {
  const size_t want = grads.ids.size() * store.spec().dim * sizeof(float);
  if (grads.values.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(grads.ids.size(), " rows of ",
                                                   store.spec().dim, " floats need ", want,
                                                   " bytes of values, not ", grads.values.size()));
  }
  GS_RETURN_IF_ERROR(store.CheckIds(grads.ids, /*unique=*/true));
  // On the bits, without a branch per value, so that the loop vectorizes: a
  // float is NaN or Inf when its exponent bits are all ones.
  constexpr uint32_t kExponent = 0x7f800000u;
  const size_t n = grads.values.size() / sizeof(float);
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, grads.values.data() + i * sizeof(float), sizeof bits);
    bad |= static_cast<uint32_t>((bits & kExponent) == kExponent);
  }
  if (bad == 0) return absl::OkStatus();
  for (size_t i = 0;; ++i) {
    float v;
    std::memcpy(&v, grads.values.data() + i * sizeof(float), sizeof v);
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row ", grads.ids[i / store.spec().dim], ": a gradient value is NaN or Inf"));
    }
  }
}

namespace {

void PrefetchRow(const float* row, uint32_t dim) {
  for (uint32_t j = 0; j < dim; j += 64 / sizeof(float)) __builtin_prefetch(row + j);
}

// One optimizer step over rows `ids` of `store` with gradient rows `g`,
// touching every row first (a touch may move the rows). A refused step
// forgets the rows it created.
absl::Status ApplyToRows(const Optimizer& optimizer, absl::Span<const uint64_t> ids,
                         absl::Span<const float> g, float scale, RowStore* store,
                         OptimizerState* state) {
  const size_t held = store->size();
  std::vector<uint32_t> at(ids.size());
  store->TouchAll(ids, at.data());
  std::vector<float*> params, s0, s1;
  params.reserve(at.size());
  s0.reserve(store->num_slots() > 0 ? at.size() : 0);
  s1.reserve(store->num_slots() > 1 ? at.size() : 0);
  for (uint32_t a : at) {
    store->KeepForSnapshot(a);
    params.push_back(store->params(a));
    if (store->num_slots() > 0) s0.push_back(store->slot(0, a));
    if (store->num_slots() > 1) s1.push_back(store->slot(1, a));
  }
  absl::Status s = optimizer.ApplyRows(params, s0, s1, store->spec().dim, g, scale, state);
  if (!s.ok()) store->DropNewest(held);
  return s;
}

}  // namespace

absl::Status AddRows(const RowGrads& grads, uint32_t dim, RowSum* sum) {
  const size_t n = grads.ids.size();
  // The values as floats (the wire's bytes need not be aligned).
  std::vector<float> g(n * dim);
  if (!g.empty()) std::memcpy(g.data(), grads.values.data(), g.size() * sizeof(float));
  std::vector<int64_t> at(n);  // each row's place in the sum, -1 = not there yet
  // One lookup per row, and checked before anything changes, so that a
  // refused push leaves the sum as it was. |x| <= FLT_MAX is false for NaN.
  for (size_t i = 0; i < n; ++i) {
    auto it = sum->index.find(grads.ids[i]);
    at[i] = it == sum->index.end() ? -1 : int64_t{it->second};
    if (at[i] < 0) continue;
    const float* s = sum->sum.data() + size_t(at[i]) * dim;
    const float* v = g.data() + i * dim;
    bool finite = true;
    for (uint32_t j = 0; j < dim; ++j) finite &= std::fabs(s[j] + v[j]) <= FLT_MAX;
    if (!finite) {
      return absl::InvalidArgumentError(absl::StrCat(
          "adding row ", grads.ids[i],
          " to its round would make the round's sum non-finite: refused, the round is"
          " unchanged"));
    }
  }
  size_t fresh = 0;
  for (int64_t a : at) fresh += a < 0;
  sum->index.reserve(sum->index.size() + fresh);
  sum->ids.reserve(sum->ids.size() + fresh);
  sum->sum.reserve(sum->sum.size() + fresh * dim);
  for (size_t i = 0; i < n; ++i) {
    if (at[i] < 0) {
      // try_emplace: a row twice in one push (CheckRowGrads refuses that
      // first) would add to its own first copy.
      auto [it, added] =
          sum->index.try_emplace(grads.ids[i], static_cast<uint32_t>(sum->ids.size()));
      if (added) {
        sum->ids.push_back(grads.ids[i]);
        sum->sum.insert(sum->sum.end(), g.begin() + i * dim, g.begin() + (i + 1) * dim);
        continue;
      }
      at[i] = it->second;
    }
    float* s = sum->sum.data() + size_t(at[i]) * dim;
    const float* v = g.data() + i * dim;
    for (uint32_t j = 0; j < dim; ++j) s[j] += v[j];
  }
  return absl::OkStatus();
}

void ReadRows(absl::Span<const uint64_t> ids, bool fp16, RowStore* store, PulledRows* out) {
  const uint32_t dim = store->spec().dim;
  const size_t row_bytes = size_t{dim} * sizeof(float);
  std::vector<uint32_t> at(ids.size());
  store->TouchAll(ids, at.data());
  auto gather = [&](char* to) {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i + 4 < ids.size()) PrefetchRow(store->params(at[i + 4]), dim);
      std::memcpy(to + i * row_bytes, store->params(at[i]), row_bytes);
    }
  };
  if (!fp16) {
    out->values.resize(ids.size() * row_bytes);
    gather(out->values.data());
    return;
  }
  // fp16 needs the max of all the rows for its scale: gathered fp32 first.
  std::vector<float> rows(ids.size() * dim);
  gather(reinterpret_cast<char*>(rows.data()));
  out->values.clear();
  out->scale = HalfRowsScale(rows);
  EncodeHalfRows(rows, out->scale, &out->values);
  out->fp16 = true;
}

absl::Status ApplyRowSum(const Optimizer& optimizer, const RowSum& sum, float scale,
                         RowStore* store, OptimizerState* state) {
  return ApplyToRows(optimizer, sum.ids, sum.sum, scale, store, state);
}

absl::Status ApplyRowGrads(const Optimizer& optimizer, const RowGrads& grads, float scale,
                           RowStore* store, OptimizerState* state) {
  std::vector<float> g(grads.values.size() / sizeof(float));
  if (!g.empty()) std::memcpy(g.data(), grads.values.data(), grads.values.size());
  return ApplyToRows(optimizer, grads.ids, g, scale, store, state);
}

}  // namespace gradstream::shard
