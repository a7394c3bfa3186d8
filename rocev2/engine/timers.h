// Internal: the engine's timers, kept so that their cost does not grow with idle QPs.
//
// A QP's requester has two deadlines (the local ACK timeout and the end of an RNR wait). Each
// is a Deadline: it reads like std::optional<Instant>, and while it is set it is linked into
// the engine's TimerQueue, ordered by time. next_deadline() is the queue's first element and
// advance() takes the expired ones from its front: O(log n) in the deadlines that are set,
// nothing at all per QP that has none (a scan of every QP per event cost 1024 idle QPs'
// worth of work on every packet). Boost.Intrusive: the links live in the QP, so setting and
// clearing a deadline allocates nothing, and a QP destroyed with a deadline set leaves the
// queue in its destructor. The queue counts its elements in O(1): the number of QPs with a
// deadline set is how many QPs share the transmit budget (Engine::Impl::unacked_limit).
#pragma once

#include <cstdint>

#include <boost/intrusive/list.hpp>
#include <boost/intrusive/set.hpp>

#include "rocev2/engine/engine.h"

namespace rrdma::rocev2 {

struct Qp;

enum class TimerKind : std::uint8_t { AckTimeout, RnrWait };

class Deadline;
struct DeadlineOrder {
  bool operator()(const Deadline& a, const Deadline& b) const;
};
using DeadlineHook = boost::intrusive::set_base_hook<boost::intrusive::link_mode<boost::intrusive::safe_link>>;
using TimerQueue = boost::intrusive::multiset<Deadline, boost::intrusive::compare<DeadlineOrder>,
                                              boost::intrusive::constant_time_size<true>>;

class Deadline : public DeadlineHook {
 public:
  Deadline() = default;
  Deadline(const Deadline&) = delete;
  // Assignment takes the other's time, not its queue or owner: `qp.req = Requester{}` keeps
  // the QP's deadlines bound to the engine.
  Deadline& operator=(const Deadline& other) {
    if (other.set_) {
      *this = other.when_;
    } else {
      reset();
    }
    return *this;
  }
  ~Deadline() { reset(); }

  // Binds the deadline to the engine's queue and names the QP it belongs to; until then it
  // is a plain optional time (as in unit tests of the requester alone).
  void bind(TimerQueue& queue, Qp& owner, TimerKind kind) {
    queue_ = &queue;
    owner_ = &owner;
    kind_ = kind;
  }

  Deadline& operator=(Instant when) {
    unlink_from_queue();
    when_ = when;
    set_ = true;
    if (queue_ != nullptr) queue_->insert(*this);
    return *this;
  }
  void reset() {
    unlink_from_queue();
    set_ = false;
  }
  explicit operator bool() const { return set_; }
  Instant operator*() const { return when_; }

  Qp& owner() const { return *owner_; }
  TimerKind kind() const { return kind_; }

 private:
  void unlink_from_queue();

  TimerQueue* queue_ = nullptr;
  Qp* owner_ = nullptr;
  TimerKind kind_ = TimerKind::AckTimeout;
  bool set_ = false;
  Instant when_{};
};

inline bool DeadlineOrder::operator()(const Deadline& a, const Deadline& b) const { return *a < *b; }

inline void Deadline::unlink_from_queue() {
  if (is_linked()) queue_->erase(queue_->iterator_to(*this));
}

// The QPs whose responder is answering a READ a step at a time (Responder::read_stream):
// advance() steps only these.
using StreamingHook = boost::intrusive::list_member_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>>;

// The QPs whose requester stopped because the host had no transmit room (EngineHost::
// transmit_room): advance() resumes them, oldest first, as room returns.
using RoomWaitHook = boost::intrusive::list_member_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>>;

}  // namespace rrdma::rocev2
