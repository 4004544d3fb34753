//! A downstream crate's own code over tollgate: an uplink that sends two-frame messages, each
//! frame counted against a per-sensor limit (a [`KeyedTable`]) and against the link's limit (a
//! [`TokenBucket`]). Its promise: a message goes out whole or not at all.
//!
//! `tests/model.rs` checks that promise with loom, under every interleaving of two senders, with
//! tollgate's atomics modeled. The `planted-bug` feature switches [`Uplink::send_pair`] to a
//! check-then-act version (read `available`, then take a frame at a time), which the model must
//! catch sending half a message.

#![no_std]

#[cfg(not(loom))]
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, Ordering::Relaxed};

use tollgate::{
    Clock, ConfigError, KeyedConfigError, KeyedTable, Quota, Rate, TokenBucket, WhenFull,
};

/// Frames in one message.
pub const FRAMES: u32 = 2;

/// A message was not sent (whole).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Over a limit: nothing was sent.
    Limited,
    /// Only part of the message went out: the promise broken.
    HalfSent,
}

/// Why an uplink could not be built.
#[derive(Debug)]
pub enum BuildError {
    /// The link's quota.
    Link(ConfigError),
    /// The per-sensor quota.
    PerSensor(KeyedConfigError),
}

/// Two-frame messages under a per-sensor limit and the link's limit.
pub struct Uplink<C: Clock + Clone> {
    link: TokenBucket<C>,
    per_sensor: KeyedTable<u8, C, 4>,
    frames: AtomicU32,
}

impl<C: Clock + Clone> Uplink<C> {
    /// The link: `link_burst` frames at once, 100 a second; each sensor: `sensor_burst` frames
    /// at once, 10 a second.
    pub fn new(clock: C, link_burst: u64, sensor_burst: u64) -> Result<Self, BuildError> {
        let link = Quota::new(Rate::per_second(100)).burst(link_burst);
        let sensor = Quota::new(Rate::per_second(10)).burst(sensor_burst);
        Ok(Self {
            link: TokenBucket::try_new(link, clock.clone()).map_err(BuildError::Link)?,
            per_sensor: KeyedTable::try_new(sensor, clock, WhenFull::Refuse)
                .map_err(BuildError::PerSensor)?,
            frames: AtomicU32::new(0),
        })
    }

    /// Sends one message of [`FRAMES`] frames for `sensor`, whole or not at all.
    #[cfg(not(feature = "planted-bug"))]
    pub fn send_pair(&self, sensor: u8) -> Result<(), Refused> {
        // Each limit takes the whole message in one call, or nothing. (Tokens the sensor's
        // limit granted stay spent when the link refuses: stricter, never a frame too many.)
        self.per_sensor
            .try_acquire(sensor, FRAMES)
            .map_err(|_| Refused::Limited)?;
        self.link
            .try_acquire(FRAMES)
            .map_err(|_| Refused::Limited)?;
        self.frames.fetch_add(FRAMES, Relaxed);
        Ok(())
    }

    /// The planted bug: checks that both limits have room, then takes a frame at a time. Two
    /// senders can both pass the check and share out the room between them.
    #[cfg(feature = "planted-bug")]
    pub fn send_pair(&self, sensor: u8) -> Result<(), Refused> {
        if self.per_sensor.available(&sensor) < u64::from(FRAMES)
            || self.link.available() < u64::from(FRAMES)
        {
            return Err(Refused::Limited);
        }
        for sent in 0..FRAMES {
            let taken =
                self.per_sensor.try_acquire(sensor, 1).is_ok() && self.link.try_acquire(1).is_ok();
            if !taken {
                return Err(if sent == 0 {
                    Refused::Limited
                } else {
                    Refused::HalfSent
                });
            }
            self.frames.fetch_add(1, Relaxed);
        }
        Ok(())
    }

    /// Frames sent so far.
    pub fn frames(&self) -> u32 {
        self.frames.load(Relaxed)
    }
}
