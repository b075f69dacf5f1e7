//! Geohash arithmetic of redis 7.0 (`geohash.c`, `geohash_helper.c`), step for step, so that
//! scores, decoded coordinates, search boxes and distances equal redis-server's bit for bit.
//!
//! # The score
//! A position is a 52-bit integer: latitude and longitude each cut into 2^26 cells over
//! [`LAT_MIN`, `LAT_MAX`] (the Web Mercator limits, not ±90) and [-180, 180], the cell numbers'
//! bits interleaved (longitude in the odd bits). The sorted-set score is that integer as a
//! double (exact below 2^53). Decoding gives the cell's centre, so GEOPOS answers a point up to
//! ~0.6 m away from what was added.
//!
//! # Searches
//! A search covers its shape by the cell containing the centre, at a step (cell size) estimated
//! from the radius, and its 8 neighbours; each of those 9 cells is one contiguous score range
//! (`[hash << s, (hash + 1) << s)`). Every member in those ranges is tested against the exact
//! shape with the haversine distance on a sphere of [`EARTH_RADIUS`] metres.
//!
//! # Floating point
//! The same operations in the same order as the C code (no fused multiply-add; `sin`, `cos`,
//! `asin` from the same libm on the engine's platform), so results match to the last bit.
//! Casts of arbitrary doubles to integers follow x86-64's `cvttsd2si` ([`c_f64_to_u64`]),
//! which is what redis-server compiled for that platform does for any score a client stored.

// Comparisons are written as the C code writes them, so NaN behaves as it does there.
#![allow(clippy::manual_range_contains, clippy::neg_cmp_op_on_partial_ord)]

/// 26 steps per coordinate: 52 bits.
pub const STEP_MAX: u8 = 26;
/// Latitude limits (EPSG:900913 / EPSG:3785 / OSGEO:41001).
pub const LAT_MIN: f64 = -85.05112878;
pub const LAT_MAX: f64 = 85.05112878;
pub const LONG_MIN: f64 = -180.0;
pub const LONG_MAX: f64 = 180.0;
/// Earth's quadratic mean radius for WGS-84, metres (redis `EARTH_RADIUS_IN_METERS`).
pub const EARTH_RADIUS: f64 = 6372797.560856;
const MERCATOR_MAX: f64 = 20037726.37;
/// redis `D_R` (`M_PI / 180.0`).
const D_R: f64 = std::f64::consts::PI / 180.0;

fn deg_rad(ang: f64) -> f64 {
    ang * D_R
}

fn rad_deg(ang: f64) -> f64 {
    ang / D_R
}

/// A geohash of `2 * step` bits (redis `GeoHashBits`); `{0, 0}` is "none" (`HASHISZERO`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bits {
    pub bits: u64,
    pub step: u8,
}

impl Bits {
    pub fn is_zero(self) -> bool {
        self.bits == 0 && self.step == 0
    }

    /// The hash's bits left-aligned to 52 (redis `geohashAlign52Bits`).
    pub fn align52(self) -> u64 {
        self.bits << (52 - u32::from(self.step) * 2)
    }
}

/// A closed interval of one coordinate.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Range {
    pub min: f64,
    pub max: f64,
}

/// The cell of a hash (redis `GeoHashArea`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Area {
    pub longitude: Range,
    pub latitude: Range,
}

/// The ranges Redis indexes: [-180, 180] × [LAT_MIN, LAT_MAX].
pub const WGS84: (Range, Range) = (
    Range {
        min: LONG_MIN,
        max: LONG_MAX,
    },
    Range {
        min: LAT_MIN,
        max: LAT_MAX,
    },
);

/// Spreads the 32 bits of `x` over the even bits and those of `y` over the odd bits.
fn interleave64(xlo: u32, ylo: u32) -> u64 {
    const B: [u64; 5] = [
        0x5555555555555555,
        0x3333333333333333,
        0x0F0F0F0F0F0F0F0F,
        0x00FF00FF00FF00FF,
        0x0000FFFF0000FFFF,
    ];
    const S: [u32; 5] = [1, 2, 4, 8, 16];
    let mut x = u64::from(xlo);
    let mut y = u64::from(ylo);
    for i in (0..5).rev() {
        x = (x | (x << S[i])) & B[i];
        y = (y | (y << S[i])) & B[i];
    }
    x | (y << 1)
}

/// The inverse of [`interleave64`]: even bits to the low half, odd bits to the high half.
fn deinterleave64(interleaved: u64) -> u64 {
    const B: [u64; 6] = [
        0x5555555555555555,
        0x3333333333333333,
        0x0F0F0F0F0F0F0F0F,
        0x00FF00FF00FF00FF,
        0x0000FFFF0000FFFF,
        0x00000000FFFFFFFF,
    ];
    const S: [u32; 6] = [0, 1, 2, 4, 8, 16];
    let mut x = interleaved;
    let mut y = interleaved >> 1;
    for i in 0..6 {
        x = (x | (x >> S[i])) & B[i];
        y = (y | (y >> S[i])) & B[i];
    }
    x | (y << 32)
}

/// redis `geohashEncode`: None outside the indexable limits or the given ranges.
pub fn encode(lon_r: Range, lat_r: Range, longitude: f64, latitude: f64, step: u8) -> Option<Bits> {
    if step > 32 || step == 0 {
        return None;
    }
    if longitude > LONG_MAX || longitude < LONG_MIN || latitude > LAT_MAX || latitude < LAT_MIN {
        return None;
    }
    if latitude < lat_r.min
        || latitude > lat_r.max
        || longitude < lon_r.min
        || longitude > lon_r.max
    {
        return None;
    }
    let mut lat_offset = (latitude - lat_r.min) / (lat_r.max - lat_r.min);
    let mut long_offset = (longitude - lon_r.min) / (lon_r.max - lon_r.min);
    lat_offset *= (1u64 << step) as f64;
    long_offset *= (1u64 << step) as f64;
    Some(Bits {
        bits: interleave64(lat_offset as u32, long_offset as u32),
        step,
    })
}

/// [`encode`] over Redis's ranges (redis `geohashEncodeWGS84`).
pub fn encode_wgs84(longitude: f64, latitude: f64, step: u8) -> Option<Bits> {
    encode(WGS84.0, WGS84.1, longitude, latitude, step)
}

/// redis `geohashDecode` over Redis's ranges: the cell of `hash`.
pub fn decode(hash: Bits) -> Area {
    let (lon_r, lat_r) = WGS84;
    let step = hash.step;
    let sep = deinterleave64(hash.bits);
    let lat_scale = lat_r.max - lat_r.min;
    let long_scale = lon_r.max - lon_r.min;
    let ilato = sep as u32;
    let ilono = (sep >> 32) as u32;
    let div = (1u64 << step) as f64;
    Area {
        latitude: Range {
            min: lat_r.min + (f64::from(ilato) * 1.0 / div) * lat_scale,
            max: lat_r.min + (f64::from(ilato.wrapping_add(1)) * 1.0 / div) * lat_scale,
        },
        longitude: Range {
            min: lon_r.min + (f64::from(ilono) * 1.0 / div) * long_scale,
            max: lon_r.min + (f64::from(ilono.wrapping_add(1)) * 1.0 / div) * long_scale,
        },
    }
}

/// The centre of a cell, clamped to the limits (redis `geohashDecodeAreaToLongLat`).
pub fn area_center(a: &Area) -> [f64; 2] {
    let lon = ((a.longitude.min + a.longitude.max) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let lat = ((a.latitude.min + a.latitude.max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    [lon, lat]
}

/// x86-64's `(uint64_t)` of a double (gcc: `cvttsd2si`, through `x - 2^63` above 2^63):
/// what redis-server does with any score it is asked to decode.
pub fn c_f64_to_u64(x: f64) -> u64 {
    const TWO63: f64 = 9223372036854775808.0;
    if x.is_nan() || x < TWO63 {
        c_f64_to_i64(x) as u64
    } else {
        (c_f64_to_i64(x - TWO63) as u64) ^ (1 << 63)
    }
}

/// x86-64's `(long long)` of a double (`cvttsd2si`): truncation, `i64::MIN` when out of range.
pub fn c_f64_to_i64(x: f64) -> i64 {
    if x.is_nan() || x >= 9223372036854775808.0 {
        i64::MIN
    } else {
        x as i64
    }
}

/// Longitude and latitude of a sorted-set score (redis `decodeGeohash`).
pub fn decode_score(score: f64) -> [f64; 2] {
    area_center(&decode(Bits {
        bits: c_f64_to_u64(score),
        step: STEP_MAX,
    }))
}

/// The score of a position already checked against the limits (redis GEOADD).
pub fn score_of(longitude: f64, latitude: f64) -> u64 {
    encode_wgs84(longitude, latitude, STEP_MAX)
        .map(Bits::align52)
        .unwrap_or(0)
}

fn move_x(hash: &mut Bits, d: i8) {
    if d == 0 {
        return;
    }
    let mut x = hash.bits & 0xaaaaaaaaaaaaaaaa;
    let y = hash.bits & 0x5555555555555555;
    let shift = 64 - u32::from(hash.step) * 2;
    let zz = 0x5555555555555555u64 >> shift;
    if d > 0 {
        x = x.wrapping_add(zz + 1);
    } else {
        x |= zz;
        x = x.wrapping_sub(zz + 1);
    }
    x &= 0xaaaaaaaaaaaaaaaau64 >> shift;
    hash.bits = x | y;
}

fn move_y(hash: &mut Bits, d: i8) {
    if d == 0 {
        return;
    }
    let x = hash.bits & 0xaaaaaaaaaaaaaaaa;
    let mut y = hash.bits & 0x5555555555555555;
    let shift = 64 - u32::from(hash.step) * 2;
    let zz = 0xaaaaaaaaaaaaaaaau64 >> shift;
    if d > 0 {
        y = y.wrapping_add(zz + 1);
    } else {
        y |= zz;
        y = y.wrapping_sub(zz + 1);
    }
    y &= 0x5555555555555555u64 >> shift;
    hash.bits = x | y;
}

/// The 8 cells around one (redis `GeoHashNeighbors`); zeroed ones are skipped by searches.
#[derive(Clone, Copy, Debug, Default)]
pub struct Neighbors {
    pub north: Bits,
    pub east: Bits,
    pub west: Bits,
    pub south: Bits,
    pub north_east: Bits,
    pub south_east: Bits,
    pub north_west: Bits,
    pub south_west: Bits,
}

/// redis `geohashNeighbors`.
pub fn neighbors(hash: Bits) -> Neighbors {
    let at = |dx: i8, dy: i8| {
        let mut h = hash;
        move_x(&mut h, dx);
        move_y(&mut h, dy);
        h
    };
    Neighbors {
        east: at(1, 0),
        west: at(-1, 0),
        south: at(0, -1),
        north: at(0, 1),
        north_west: at(-1, 1),
        north_east: at(1, 1),
        south_east: at(1, -1),
        south_west: at(-1, -1),
    }
}

/// The step whose cells are about `range_meters` wide (redis `geohashEstimateStepsByRadius`).
pub fn estimate_steps(mut range_meters: f64, lat: f64) -> u8 {
    if range_meters == 0.0 {
        return 26;
    }
    let mut step: i32 = 1;
    while range_meters < MERCATOR_MAX {
        range_meters *= 2.0;
        step += 1;
    }
    step -= 2;
    if lat > 66.0 || lat < -66.0 {
        step -= 1;
        if lat > 80.0 || lat < -80.0 {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u8
}

/// What a search covers (redis `GeoShape`): a circle or an axis-aligned box around `xy`.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Centre: longitude, latitude.
    pub xy: [f64; 2],
    /// Metres per unit of the radius / width / height (`km`: 1000).
    pub conversion: f64,
    pub kind: ShapeKind,
}

/// The two search shapes, sizes in the request's unit.
#[derive(Clone, Copy, Debug)]
pub enum ShapeKind {
    Radius(f64),
    Box { width: f64, height: f64 },
}

/// redis `geohashBoundingBox`: `[min_lon, min_lat, max_lon, max_lat]`.
pub fn bounding_box(s: &Shape) -> [f64; 4] {
    let [longitude, latitude] = s.xy;
    let (height, width) = match s.kind {
        ShapeKind::Radius(r) => (s.conversion * r, s.conversion * r),
        ShapeKind::Box { width, height } => {
            (s.conversion * (height / 2.0), s.conversion * (width / 2.0))
        }
    };
    let lat_delta = rad_deg(height / EARTH_RADIUS);
    let long_delta_top = rad_deg(width / EARTH_RADIUS / deg_rad(latitude + lat_delta).cos());
    let long_delta_bottom = rad_deg(width / EARTH_RADIUS / deg_rad(latitude - lat_delta).cos());
    let southern = latitude < 0.0;
    [
        if southern {
            longitude - long_delta_bottom
        } else {
            longitude - long_delta_top
        },
        latitude - lat_delta,
        if southern {
            longitude + long_delta_bottom
        } else {
            longitude + long_delta_top
        },
        latitude + lat_delta,
    ]
}

/// The 9 cells a search visits, in Redis's order: the centre's, then north, south, east, west,
/// north-east, north-west, south-east, south-west (zeroed when useless).
pub fn search_cells(s: &Shape) -> [Bits; 9] {
    let [min_lon, min_lat, max_lon, max_lat] = bounding_box(s);
    let [longitude, latitude] = s.xy;
    let radius_meters = match s.kind {
        ShapeKind::Radius(r) => r,
        ShapeKind::Box { width, height } => {
            ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt()
        }
    } * s.conversion;
    let mut steps = estimate_steps(radius_meters, latitude);
    let (lon_r, lat_r) = WGS84;
    let at = |steps: u8| {
        let hash = encode(lon_r, lat_r, longitude, latitude, steps).unwrap_or_default();
        (hash, neighbors(hash), decode(hash))
    };
    let (mut hash, mut nb, mut area) = at(steps);
    let decrease = decode(nb.north).latitude.max < max_lat
        || decode(nb.south).latitude.min > min_lat
        || decode(nb.east).longitude.max < max_lon
        || decode(nb.west).longitude.min > min_lon;
    if steps > 1 && decrease {
        steps -= 1;
        (hash, nb, area) = at(steps);
    }
    if steps >= 2 {
        let zero = Bits::default();
        if area.latitude.min < min_lat {
            nb.south = zero;
            nb.south_west = zero;
            nb.south_east = zero;
        }
        if area.latitude.max > max_lat {
            nb.north = zero;
            nb.north_east = zero;
            nb.north_west = zero;
        }
        if area.longitude.min < min_lon {
            nb.west = zero;
            nb.south_west = zero;
            nb.north_west = zero;
        }
        if area.longitude.max > max_lon {
            nb.east = zero;
            nb.south_east = zero;
            nb.north_east = zero;
        }
    }
    [
        hash,
        nb.north,
        nb.south,
        nb.east,
        nb.west,
        nb.north_east,
        nb.north_west,
        nb.south_east,
        nb.south_west,
    ]
}

/// redis `geohashGetLatDistance`.
pub fn lat_distance(lat1d: f64, lat2d: f64) -> f64 {
    EARTH_RADIUS * (deg_rad(lat2d) - deg_rad(lat1d)).abs()
}

/// Haversine distance in metres (redis `geohashGetDistance`).
pub fn distance(lon1d: f64, lat1d: f64, lon2d: f64, lat2d: f64) -> f64 {
    let lon1r = deg_rad(lon1d);
    let lon2r = deg_rad(lon2d);
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1d, lat2d);
    }
    let lat1r = deg_rad(lat1d);
    let lat2r = deg_rad(lat2d);
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS * a.sqrt().asin()
}

/// The distance from the shape's centre to `xy` if `xy` is inside the shape (redis
/// `geoWithinShape` after decoding).
pub fn within(s: &Shape, xy: [f64; 2]) -> Option<f64> {
    Probe::new(s).within(xy)
}

/// A shape ready to test many points (a search tests every member of 9 cells): the centre's
/// radians and cosine computed once, and for a circle a latitude cut that rejects a point
/// without trigonometry. Answers exactly as [`within`] computed from scratch: the cached values
/// are the ones the C code recomputes, and the cut only rejects points whose haversine
/// distance is provably above the radius (the great-circle distance is never below the
/// latitude distance, and the cut leaves a 1e-9 relative, 1 µm absolute margin for rounding).
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    shape: Shape,
    lon1r: f64,
    lat1r: f64,
    cos_lat1: f64,
    /// A circle's radius in metres; a box's width and height in metres.
    radius_m: f64,
    width_m: f64,
    height_m: f64,
    /// Points whose latitude distance from the centre exceeds this are outside the circle.
    lat_cut: f64,
}

impl Probe {
    pub fn new(s: &Shape) -> Probe {
        let lat1r = deg_rad(s.xy[1]);
        let (radius_m, width_m, height_m) = match s.kind {
            ShapeKind::Radius(r) => (r * s.conversion, 0.0, 0.0),
            ShapeKind::Box { width, height } => (0.0, width * s.conversion, height * s.conversion),
        };
        // Far from antipodal (asin near 1 loses precision there): below 5,000 km only.
        let lat_cut = if radius_m < 5.0e6 {
            radius_m * (1.0 + 1e-9) + 1e-6
        } else {
            f64::INFINITY
        };
        Probe {
            shape: *s,
            lon1r: deg_rad(s.xy[0]),
            lat1r,
            cos_lat1: lat1r.cos(),
            radius_m,
            width_m,
            height_m,
            lat_cut,
        }
    }

    /// [`distance`] from the centre to (`lon2d`, `lat2d`), the centre's values cached.
    fn dist_from_center(&self, lon2d: f64, lat2d: f64, cos_lat2: impl FnOnce(f64) -> f64) -> f64 {
        let lon2r = deg_rad(lon2d);
        let v = ((lon2r - self.lon1r) / 2.0).sin();
        if v == 0.0 {
            return lat_distance(self.shape.xy[1], lat2d);
        }
        let lat2r = deg_rad(lat2d);
        let u = ((lat2r - self.lat1r) / 2.0).sin();
        let a = u * u + self.cos_lat1 * cos_lat2(lat2r) * v * v;
        2.0 * EARTH_RADIUS * a.sqrt().asin()
    }

    /// Whether a point of `area` may be inside the shape; false only when every point of the
    /// area is provably outside (a lower bound of the distance exceeds the limit by a 1e-9
    /// relative, 1 m absolute margin, far above rounding). Searches skip such parts of their
    /// cells without reading them; what they do read is tested exactly as Redis tests it.
    pub fn may_contain(&self, area: &Area) -> bool {
        let [x1, y1] = self.shape.xy;
        // Smallest latitude difference, degrees.
        let dlat = if area.latitude.min > y1 {
            area.latitude.min - y1
        } else if area.latitude.max < y1 {
            y1 - area.latitude.max
        } else {
            0.0
        };
        let lat_min_m = EARTH_RADIUS * deg_rad(dlat);
        // Smallest longitude difference, degrees, across the antimeridian too.
        let dlon = if area.longitude.min <= x1 && x1 <= area.longitude.max {
            0.0
        } else {
            let a = (area.longitude.min - x1).rem_euclid(360.0);
            let b = (x1 - area.longitude.max).rem_euclid(360.0);
            a.min(b).min(180.0)
        };
        let max_abs_lat = area
            .latitude
            .min
            .abs()
            .max(area.latitude.max.abs())
            .min(90.0);
        let cos2_min = deg_rad(max_abs_lat).cos().max(0.0);
        let sin_half = deg_rad(dlon / 2.0).sin().max(0.0);
        let slack = |limit: f64| limit * (1.0 + 1e-9) + 1.0;
        match self.shape.kind {
            ShapeKind::Radius(_) => {
                if lat_min_m > slack(self.radius_m) {
                    return false;
                }
                if self.radius_m < 5.0e6 {
                    let lon_min_m = 2.0
                        * EARTH_RADIUS
                        * ((self.cos_lat1 * cos2_min).sqrt() * sin_half)
                            .min(1.0)
                            .asin();
                    if lon_min_m > slack(self.radius_m) {
                        return false;
                    }
                }
                true
            }
            ShapeKind::Box { .. } => {
                if lat_min_m > slack(self.height_m / 2.0) {
                    return false;
                }
                let lon_min_m = 2.0 * EARTH_RADIUS * (cos2_min * sin_half).min(1.0).asin();
                lon_min_m <= slack(self.width_m / 2.0)
            }
        }
    }

    /// See [`within`].
    pub fn within(&self, xy: [f64; 2]) -> Option<f64> {
        let y1 = self.shape.xy[1];
        let [x2, y2] = xy;
        match self.shape.kind {
            ShapeKind::Radius(_) => {
                if lat_distance(y1, y2) > self.lat_cut {
                    return None;
                }
                let d = self.dist_from_center(x2, y2, f64::cos);
                // `!(d > r)`: Redis's test, which keeps a NaN distance.
                (!(d > self.radius_m)).then_some(d)
            }
            ShapeKind::Box { .. } => {
                if lat_distance(y2, y1) > self.height_m / 2.0 {
                    return None;
                }
                // distance(x2, y2, x1, y2): both latitudes are the point's.
                let lon2r = deg_rad(x2);
                let v = ((self.lon1r - lon2r) / 2.0).sin();
                let lat2r = deg_rad(y2);
                let cos_lat2 = lat2r.cos();
                let lon_distance = if v == 0.0 {
                    lat_distance(y2, y2)
                } else {
                    // Equal latitudes: u = sin(0) = 0, and 0 + x is x.
                    let a = cos_lat2 * cos_lat2 * v * v;
                    2.0 * EARTH_RADIUS * a.sqrt().asin()
                };
                if lon_distance > self.width_m / 2.0 {
                    return None;
                }
                Some(self.dist_from_center(x2, y2, |_| cos_lat2))
            }
        }
    }
}

/// The 11-character standard geohash of a score (redis GEOHASH: decode, re-encode over
/// [-90, 90], 52 bits in base 32, the 11th character `0`).
pub fn standard_geohash(score: f64) -> [u8; 11] {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let [lon, lat] = decode_score(score);
    let hash = encode(
        Range {
            min: -180.0,
            max: 180.0,
        },
        Range {
            min: -90.0,
            max: 90.0,
        },
        lon,
        lat,
        26,
    )
    .unwrap_or_default();
    let mut out = [b'0'; 11];
    for (i, c) in out.iter_mut().enumerate().take(10) {
        let idx = (hash.bits >> (52 - (i + 1) * 5)) & 0x1f;
        *c = ALPHABET[idx as usize];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleave_round_trips() {
        for (x, y) in [
            (0u32, 0u32),
            (1, 0),
            (0, 1),
            (0xFFFF_FFFF, 0x1234_5678),
            (67108864, 3),
        ] {
            let i = interleave64(x, y);
            let d = deinterleave64(i);
            assert_eq!((d as u32, (d >> 32) as u32), (x, y));
        }
    }

    /// Scores and positions read from redis-server 7.0.15 (GEOADD, ZSCORE, GEOPOS, GEOHASH).
    #[test]
    fn palermo_like_redis() {
        assert_eq!(score_of(13.361389, 38.115556), 3479099956230698);
        assert_eq!(score_of(15.087269, 37.502669), 3479447370796909);
        let [lon, lat] = decode_score(3479099956230698.0);
        assert_eq!(format!("{lon:.17}"), "13.36138933897018433");
        assert_eq!(format!("{lat:.17}"), "38.11555639549629859");
        assert_eq!(&standard_geohash(3479099956230698.0), b"sqc8b49rny0");
        let [lon2, lat2] = decode_score(3479447370796909.0);
        let d = distance(lon, lat, lon2, lat2);
        assert_eq!(format!("{:.4}", d), "166274.1516");
    }

    #[test]
    fn casts_follow_x86() {
        assert_eq!(c_f64_to_u64(-1.0), u64::MAX);
        assert_eq!(c_f64_to_u64(f64::INFINITY), 0);
        assert_eq!(c_f64_to_u64(f64::NEG_INFINITY), 1 << 63);
        assert_eq!(c_f64_to_u64(1e19), 10_000_000_000_000_000_000);
        assert_eq!(c_f64_to_i64(1e19), i64::MIN);
        assert_eq!(c_f64_to_i64(-2.5), -2);
    }
}
