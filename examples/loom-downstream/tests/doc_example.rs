//! The crate docs' example ("Model-check your code with tollgate"), as written there: kept
//! here so that it is known to compile and pass.
#![cfg(loom)]
use loom::sync::atomic::{AtomicU32, Ordering::Relaxed};
use loom::sync::Arc;
use tollgate::{KeyedTable, ManualClock, Quota, Rate, TokenBucket, WhenFull};

/// Your code: a two-frame message goes out whole, under a per-sensor and a link limit.
struct Uplink {
    link: TokenBucket<Arc<ManualClock>>,
    per_sensor: KeyedTable<u8, Arc<ManualClock>, 4>,
    frames: AtomicU32,
}

impl Uplink {
    fn send_pair(&self, sensor: u8) -> bool {
        // Each limit takes both frames in one call, or nothing. (A check of `available()`
        // followed by two takes of one would race: the model below finds it.)
        let sent =
            self.per_sensor.try_acquire(sensor, 2).is_ok() && self.link.try_acquire(2).is_ok();
        if sent {
            self.frames.fetch_add(2, Relaxed);
        }
        sent
    }
}

#[test]
fn a_message_goes_out_whole() {
    loom::model(|| {
        let clock = Arc::new(ManualClock::new());
        let room = Quota::new(Rate::per_second(10)).burst(3);
        let uplink = Arc::new(Uplink {
            link: TokenBucket::try_new(room, clock.clone()).unwrap(),
            per_sensor: KeyedTable::try_new(room, clock, WhenFull::Refuse).unwrap(),
            frames: AtomicU32::new(0),
        });
        let other = {
            let uplink = uplink.clone();
            loom::thread::spawn(move || uplink.send_pair(7))
        };
        let sent = [uplink.send_pair(7), other.join().unwrap()];
        assert_eq!(uplink.frames.load(Relaxed), 2, "{sent:?}");
    });
}
