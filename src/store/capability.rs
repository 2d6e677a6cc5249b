//! `capability!`: one capability of a store (a trait of related operations) declared together
//! with its layer twin, so that an operation is written once.
//!
//! For `pub trait X, layer XLayer { ... }` it declares
//! - `trait X`: the operations as a backend implements them; a `required` one has no default;
//! - `trait XLayer: Layer<Below: X>`: the same operations for a store over another one
//!   (`crate::store::layers::Layer`). A `required` or `provided` operation forwards to the same
//!   call on `inner()`; a `derived` one keeps its default, which is made of the store's own
//!   other operations, so a layer that changes those is never bypassed by it;
//! - `impl<L: XLayer> X for L`, routing every operation through `XLayer`.
//!
//! A layer implements `XLayer` and writes only the operations it changes; a new operation is
//! written in the capability and in the layers that change it, nowhere else. Defaults call
//! sibling operations as `Self::op(self, ..)`: in a layer `self.op(..)` would be ambiguous
//! between `X` and `XLayer`.
//!
//! The grammar of an operation: attributes, `required`, `provided` or `derived`, an `async
//! fn` (async_trait boxes it; no generics) or a plain `fn` (lifetime parameters allowed) with
//! `&self` first, then `;` for a required one, or the default body.

macro_rules! capability {
    (
        $(#[$doc:meta])*
        pub trait $cap:ident $(: $sup:path)?, layer $layer:ident { $($ops:tt)* }
    ) => {
        $crate::store::capability::capability!(
            @op ($(#[$doc])*) ($($sup)?) $cap $layer [] [] [] $($ops)*
        );
    };

    // All operations read: the three items.
    (@op ($($doc:tt)*) ($($sup:path)?) $cap:ident $layer:ident
        [$($own:tt)*] [$($fwd:tt)*] [$($route:tt)*]) => {
        $($doc)*
        #[async_trait::async_trait]
        pub trait $cap: $($sup +)? Send + Sync + 'static { $($own)* }

        #[doc = concat!("`", stringify!($cap), "` for a store over another one: each operation")]
        /// forwards to `inner()` unless the layer writes it (see `crate::store::capability`).
        #[async_trait::async_trait]
        pub trait $layer: $crate::store::layers::Layer<Below: $cap> $(+ $sup)? { $($fwd)* }

        #[async_trait::async_trait]
        #[deny(clippy::missing_trait_methods)]
        impl<L: $layer> $cap for L { $($route)* }
    };

    // An async operation and a plain one differ in `async` and `.await` only: each is read
    // as the tokens it puts there.
    (@op $doc:tt $sup:tt $cap:ident $layer:ident [$($own:tt)*] [$($fwd:tt)*] [$($route:tt)*]
        $(#[$m:meta])* $kind:ident async fn $($rest:tt)*) => {
        $crate::store::capability::capability!(@op $doc $sup $cap $layer
            [$($own)*] [$($fwd)*] [$($route)*] @fn (async) (.await) ($(#[$m])*) $kind $($rest)*);
    };
    (@op $doc:tt $sup:tt $cap:ident $layer:ident [$($own:tt)*] [$($fwd:tt)*] [$($route:tt)*]
        $(#[$m:meta])* $kind:ident fn $($rest:tt)*) => {
        $crate::store::capability::capability!(@op $doc $sup $cap $layer
            [$($own)*] [$($fwd)*] [$($route)*] @fn () () ($(#[$m])*) $kind $($rest)*);
    };

    (@op $doc:tt $sup:tt $cap:ident $layer:ident [$($own:tt)*] [$($fwd:tt)*] [$($route:tt)*]
        @fn ($($asy:tt)*) ($($aw:tt)*) ($(#[$m:meta])*) required $name:ident $(<$lt:lifetime>)?
            (&$($slt:lifetime)? $self:ident $(, $a:ident: $t:ty)* $(,)?) $(-> $ret:ty)?;
            $($rest:tt)*) => {
        $crate::store::capability::capability!(@op $doc $sup $cap $layer
            [$($own)* $(#[$m])*
                $($asy)* fn $name $(<$lt>)? (&$($slt)? $self $(, $a: $t)*) $(-> $ret)?;]
            [$($fwd)*
                $($asy)* fn $name $(<$lt>)? (&$($slt)? $self $(, $a: $t)*) $(-> $ret)? {
                    $self.inner().$name($($a),*) $($aw)*
                }]
            [$($route)*
                $($asy)* fn $name $(<$lt>)? (&$($slt)? $self $(, $a: $t)*) $(-> $ret)? {
                        <L as $layer>::$name($self $(, $a)*) $($aw)*
                }]
            $($rest)*);
    };
    (@op $doc:tt $sup:tt $cap:ident $layer:ident [$($own:tt)*] [$($fwd:tt)*] [$($route:tt)*]
        @fn ($($asy:tt)*) ($($aw:tt)*) ($(#[$m:meta])*) provided $name:ident $(<$lt:lifetime>)?
            (&$($slt:lifetime)? $self:ident $(, $a:ident: $t:ty)* $(,)?) $(-> $ret:ty)?
            $body:block $($rest:tt)*) => {
        $crate::store::capability::capability!(@op $doc $sup $cap $layer
            [$($own)* $(#[$m])*
                $($asy)* fn $name $(<$lt>)? (&$($slt)? $self $(, $a: $t)*) $(-> $ret)? $body]
            [$($fwd)*
                $($asy)* fn $name $(<$lt>)? (&$($slt)? $self $(, $a: $t)*) $(-> $ret)? {
                    $self.inner().$name($($a),*) $($aw)*
                }]
            [$($route)*
                $($asy)* fn $name $(<$lt>)? (&$($slt)? $self $(, $a: $t)*) $(-> $ret)? {
                        <L as $layer>::$name($self $(, $a)*) $($aw)*
                }]
            $($rest)*);
    };
    (@op $doc:tt $sup:tt $cap:ident $layer:ident [$($own:tt)*] [$($fwd:tt)*] [$($route:tt)*]
        @fn ($($asy:tt)*) ($($aw:tt)*) ($(#[$m:meta])*) derived $name:ident $(<$lt:lifetime>)?
            (&$($slt:lifetime)? $self:ident $(, $a:ident: $t:ty)* $(,)?) $(-> $ret:ty)?
            $body:block $($rest:tt)*) => {
        $crate::store::capability::capability!(@op $doc $sup $cap $layer
            [$($own)* $(#[$m])*
                $($asy)* fn $name $(<$lt>)? (&$($slt)? $self $(, $a: $t)*) $(-> $ret)? $body]
            [$($fwd)*
                $($asy)* fn $name $(<$lt>)? (&$($slt)? $self $(, $a: $t)*) $(-> $ret)? $body]
            [$($route)*
                $($asy)* fn $name $(<$lt>)? (&$($slt)? $self $(, $a: $t)*) $(-> $ret)? {
                        <L as $layer>::$name($self $(, $a)*) $($aw)*
                }]
            $($rest)*);
    };
}

pub(crate) use capability;
